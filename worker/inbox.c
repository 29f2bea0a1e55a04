/*
 * worker/inbox.c - a small mutex-guarded ring of control messages per run
 * (see inbox.h).
 */
#include "worker/inbox.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct worker_inbox {
	pthread_mutex_t mu;
	int wake_fd;
	size_t head, count;
	uint64_t dropped;
	proto_ctl_t ring[WORKER_INBOX_MAX];
};

worker_inbox_t *worker_inbox_new(int wake_fd)
{
	worker_inbox_t *in = calloc(1, sizeof(*in));
	if (!in)
		return NULL;
	pthread_mutex_init(&in->mu, NULL);
	in->wake_fd = wake_fd;
	return in;
}

void worker_inbox_free(worker_inbox_t *in)
{
	if (!in)
		return;
	pthread_mutex_destroy(&in->mu);
	free(in);
}

int worker_inbox_push(worker_inbox_t *in, const proto_ctl_t *msg)
{
	int rc = 0;
	pthread_mutex_lock(&in->mu);
	if (in->count == WORKER_INBOX_MAX) {
		in->dropped++;
		rc = -1;
	} else {
		in->ring[(in->head + in->count) % WORKER_INBOX_MAX] = *msg;
		in->count++;
	}
	pthread_mutex_unlock(&in->mu);
	if (rc == 0 && in->wake_fd >= 0) {
		uint64_t one = 1;
		ssize_t w = write(in->wake_fd, &one, sizeof(one));
		(void)w;
	}
	return rc;
}

int worker_inbox_pop(worker_inbox_t *in, proto_ctl_t *msg)
{
	int got = 0;
	pthread_mutex_lock(&in->mu);
	if (in->count) {
		*msg = in->ring[in->head];
		memset(&in->ring[in->head], 0, sizeof(in->ring[in->head]));
		in->head = (in->head + 1) % WORKER_INBOX_MAX;
		in->count--;
		got = 1;
	}
	pthread_mutex_unlock(&in->mu);
	return got;
}

uint64_t worker_inbox_dropped(worker_inbox_t *in)
{
	pthread_mutex_lock(&in->mu);
	uint64_t d = in->dropped;
	pthread_mutex_unlock(&in->mu);
	return d;
}
