/*
 * dns_blackhole.h - make this process's only name server one that takes every query and
 * answers none (a UDP socket on a loopback address, bind-mounted in as /etc/resolv.conf in
 * a private mount namespace, timeout:2 attempts:1): getaddrinfo() of any name then blocks
 * about 2 s. Why a header: the redis and s3 tiers' deadline tests both need a lookup that
 * stalls. Needs root; exits 1 (a failure, not a skip) without it. Include after testlib.h.
 */
#ifndef KVT_TEST_DNS_BLACKHOLE_H
#define KVT_TEST_DNS_BLACKHOLE_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/socket.h>

/* A name server that reads every query and answers none. */
static int blackhole_fd = -1;

static void *blackhole(void *arg)
{
	(void)arg;
	char buf[1500];
	for (;;)
		if (recv(blackhole_fd, buf, sizeof(buf), 0) < 0 && errno != EINTR)
			return NULL;
}

/* ns_addr: a loopback address of the test's own (127.0.0.x); the resolv.conf is written
 * into dir. */
static void private_resolver(const char *dir, const char *ns_addr)
{
	blackhole_fd = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(53)};
	inet_pton(AF_INET, ns_addr, &a.sin_addr);
	CHECK(blackhole_fd >= 0);
	if (bind(blackhole_fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		fprintf(stderr, "FAIL: bind %s:53: %s (root needed)\n", ns_addr, strerror(errno));
		exit(1);
	}
	pthread_t th;
	CHECK_EQ(pthread_create(&th, NULL, blackhole, NULL), 0);
	pthread_detach(th);
	char conf[300];
	snprintf(conf, sizeof(conf), "%s/resolv.conf", dir);
	FILE *f = fopen(conf, "w");
	CHECK(f != NULL);
	fprintf(f, "nameserver %s\noptions timeout:2 attempts:1\n", ns_addr);
	fclose(f);
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount(conf, "/etc/resolv.conf", NULL, MS_BIND, NULL) < 0) {
		fprintf(stderr, "FAIL: a private /etc/resolv.conf: %s (root needed)\n",
			strerror(errno));
		exit(1);
	}
}

#endif
