/*
 * daemon_proto.c - validation and framing of kvtierd messages (src/daemon_proto.h). Every
 * length, offset and count a peer sends passes kvtd_req_check before anything uses it, so
 * a malformed or hostile client can only get its own connection dropped.
 */
#include "daemon_proto.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int bad(char *err, size_t errlen, int rc, const char *why)
{
	if (err && errlen)
		snprintf(err, errlen, "%s", why);
	return rc;
}

/* [off, off+len) inside [0, shm_len), without overflow. */
static int range_ok(uint64_t off, uint64_t len, uint64_t shm_len)
{
	return off <= shm_len && len <= shm_len - off;
}

int kvtd_req_check(const struct kvtd_req *r, size_t got, uint64_t shm_len,
		   const struct kvt_geometry *g, char *err, size_t errlen)
{
	if (got != sizeof(*r))
		return bad(err, errlen, -EPROTO, "message of the wrong size");
	if (r->magic != KVTD_MAGIC)
		return bad(err, errlen, -EPROTO, "bad magic");
	if (r->op < KVTD_HELLO || r->op > KVTD_OP_MAX)
		return bad(err, errlen, -EPROTO, "unknown operation");
	if (r->op == KVTD_HELLO)
		return r->version == KVTD_VERSION ? 0
						  : bad(err, errlen, -EPROTO, "protocol version");
	if (!shm_len)
		return bad(err, errlen, -EPROTO, "operation before HELLO");
	if (r->has_parent > 1)
		return bad(err, errlen, -EINVAL, "has_parent is not 0 or 1");
	switch (r->op) {
	case KVTD_PUT_RESERVE:
		if (r->n_tokens == 0 || r->n_tokens > g->chunk_tokens)
			return bad(err, errlen, -EINVAL, "n_tokens out of range");
		break;
	case KVTD_PUT:
		if (r->n_tokens == 0 || r->n_tokens > g->chunk_tokens)
			return bad(err, errlen, -EINVAL, "n_tokens out of range");
		if (r->len != kvt_payload_bytes(g, r->n_tokens))
			return bad(err, errlen, -EINVAL, "payload length does not match n_tokens");
		break;
	case KVTD_GET:
	case KVTD_GET_PIN:
		/* layer_end 0 means every layer, as in kvt_get: [layers, 0) is empty */
		if (r->layer_end > g->layers ||
		    r->layer_begin >= (r->layer_end ? r->layer_end : g->layers))
			return bad(err, errlen, -EINVAL, "layer range out of bounds");
		break;
	case KVTD_TP_RESERVE:
		if (r->n_tokens == 0 || r->n_tokens > g->chunk_tokens)
			return bad(err, errlen, -EINVAL, "n_tokens out of range");
		if (r->len < sizeof(struct kvtd_tp_claim) + g->kv_heads)
			return bad(err, errlen, -EINVAL, "claim range too small");
		/* fall through - the head range too */
	case KVTD_TP_WRITTEN:
		if (r->layer_begin >= r->layer_end || r->layer_end > g->kv_heads)
			return bad(err, errlen, -EINVAL, "head range out of bounds");
		if (r->op == KVTD_TP_WRITTEN && (r->n >= INT32_MAX || r->flags > 1))
			return bad(err, errlen, -EINVAL, "slot or flags out of range");
		break;
	case KVTD_UNPIN:
	case KVTD_PUT_COMMIT:
		if (r->n >= INT32_MAX)
			return bad(err, errlen, -EINVAL, "slot out of range");
		break;
	case KVTD_LOOKUP:
	case KVTD_PREFETCH:
		/* keys, then (lookup) one tier byte per key */
		if (r->n > shm_len / (KVT_KEY_BYTES + 1))
			return bad(err, errlen, -EINVAL, "key count exceeds the region");
		if (r->len != r->n * (KVT_KEY_BYTES + 1))
			return bad(err, errlen, -EINVAL, "key range length does not match n");
		break;
	case KVTD_STATS:
		if (r->len < KVTD_STATS_MIN_BYTES)
			return bad(err, errlen, -EINVAL, "stats range too small");
		break;
	case KVTD_STATUS:
		if (r->len < KVTD_STATUS_MIN_BYTES)
			return bad(err, errlen, -EINVAL, "status range too small");
		break;
	default:
		break;
	}
	if (!range_ok(r->off, r->len, shm_len))
		return bad(err, errlen, -EINVAL, "byte range outside the shared region");
	return 0;
}

int kvtd_send(int sock, const void *msg, size_t len, int fd)
{
	struct iovec iov = {.iov_base = (void *)msg, .iov_len = len};
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	if (fd >= 0) {
		memset(&u, 0, sizeof(u));
		mh.msg_control = u.buf;
		mh.msg_controllen = sizeof(u.buf);
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	for (;;) {
		ssize_t w = sendmsg(sock, &mh, MSG_NOSIGNAL);
		if (w == (ssize_t)len)
			return 0;
		if (w >= 0)
			return -EPROTO; /* seqpacket sends whole messages or nothing */
		if (errno == EINTR)
			continue;
		return errno == EAGAIN || errno == EWOULDBLOCK ? -ETIMEDOUT : -errno;
	}
}

long kvtd_recv_fds(int sock, void *msg, size_t cap, int *fds, int *nfds)
{
	struct iovec iov = {.iov_base = msg, .iov_len = cap};
	/* Room for as many descriptors as one message can carry: a control buffer too small
	 * for them has the kernel drop the rest, and a dropped descriptor's last close then
	 * runs in this thread, whatever it waits for (see the header). */
	union {
		char buf[CMSG_SPACE(sizeof(int) * KVTD_MAX_FDS)];
		struct cmsghdr align;
	} u;
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			    .msg_controllen = sizeof(u.buf)};
	*nfds = 0;
	ssize_t r;
	do
		r = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK ? -ETIMEDOUT : -errno;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t nfd = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < nfd; i++) {
			int f;
			memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (*nfds < KVTD_MAX_FDS)
				fds[(*nfds)++] = f;
			else
				close(f); /* cannot happen: the kernel caps a message at as many */
		}
	}
	if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))
		return -EMSGSIZE;
	return (long)r;
}

long kvtd_recv(int sock, void *msg, size_t cap, int *fd)
{
	int fds[KVTD_MAX_FDS], n;
	long r = kvtd_recv_fds(sock, msg, cap, fds, &n);
	if (fd)
		*fd = -1;
	/* Keep at most one descriptor; close any other a peer attached. A truncated message,
	 * or an empty one (EOF reads as one too, and a peer can attach a descriptor to it),
	 * keeps none. */
	for (int i = 0; i < n; i++) {
		if (fd && *fd < 0 && r > 0)
			*fd = fds[i];
		else
			close(fds[i]);
	}
	return r;
}
