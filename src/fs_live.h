/*
 * fs_live.h - is the writer of an fs-tier temporary alive? Proof of death on its own node.
 *
 * Why: a sweep removes a temporary only once it has watched it unchanged for
 * fs.tmp_max_age_s (an hour), because on a shared file system another node's writer may
 * still be writing it and clocks differ. An instance that lives shorter than that - an
 * engine that crashes and restarts every few minutes - never removes the temporaries its
 * dead predecessors left, and each crash leaves up to a queue of objects. On the node a
 * writer ran on there is a certain answer: each writing instance holds an flock on a file
 * named by its temporaries' nonce in a node-local directory (fs.live_dir, /dev/shm) for as
 * long as it is open; the kernel releases it when the process dies, however it dies. A
 * sweep that finds that file and can take its lock knows the writer is gone.
 *
 * Only a positive proof counts: no file (another node, another container, a reboot), a
 * file owned by someone other than the temporary's owner (or linked twice), or any error
 * says "unknown", and
 * the temporary waits for the watch as before. A forked child that inherited the lock keeps
 * its parent's temporaries alive, which is only ever conservative.
 */
#ifndef KVT_FS_LIVE_H
#define KVT_FS_LIVE_H

#include <stdint.h>
#include <sys/types.h>

enum kvt_fs_writer { FS_WRITER_UNKNOWN, FS_WRITER_LIVE, FS_WRITER_DEAD };

/* Whether dir is on a file system known to be node-local (tmpfs, ramfs, a local disk's
 * ext4, xfs, btrfs, f2fs, overlayfs, ...): 1; 0 for any other (a network or cluster file
 * system, FUSE, one not known), whose name (or "type 0x<magic>") goes to type; -errno when
 * dir cannot be looked at. A lock there may not be seen by another node's probe, or a
 * remote file of a writer with this host's name (containers) may be taken for a local
 * one: the tier then offers and trusts no proof (fs.live_dir off). */
int kvt__fs_live_local(const char *dir, char *type, size_t n);
/* Creates and locks dir's file for nonce (held until kvt__fs_live_release): the fd, or
 * -errno (the instance then just has no such proof to offer). */
int kvt__fs_live_claim(const char *dir, uint64_t nonce);
/* Removes nonce's file and closes fd (a claim's, or a probe's of a dead writer). */
void kvt__fs_live_release(const char *dir, uint64_t nonce, int fd);
/* The verdict on nonce's writer, for a temporary owned by owner. DEAD leaves the file
 * locked by *fd (release it once that writer's temporaries are removed); otherwise *fd is
 * -1. */
enum kvt_fs_writer kvt__fs_live_probe(const char *dir, uint64_t nonce, uid_t owner, int *fd);
/* The nonce of a temporary named ".<key>.tmp.<host>.<pid>.<nonce: 16 hex>.<n>" written on
 * host (this node's name as the tier writes it); false if the name is not of that form or
 * names another host. */
int kvt__fs_live_nonce(const char *name, const char *host, uint64_t *nonce);
/* Removes this user's files of writers dead for over max_age_s (found unlocked): those
 * that died with no temporary left for a sweep to find. By then a sweep's watch removes
 * whatever temporary such a writer might still have. */
void kvt__fs_live_prune(const char *dir, uint64_t max_age_s);

#endif
