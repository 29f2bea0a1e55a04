/*
 * proto/job.c - parsing, validation, sealing and serialization of the v1 job
 * (SPEC §2).
 */
#include "proto/job.h"

#include <pthread.h>

#include <sodium.h>

static pthread_once_t sodium_once = PTHREAD_ONCE_INIT;
static int sodium_status = -1;

static void sodium_init_once(void)
{
	/* 1 means "already initialised", which is success too. */
	sodium_status = sodium_init() < 0 ? -1 : 0;
}

int proto_sodium_init(void)
{
	pthread_once(&sodium_once, sodium_init_once);
	return sodium_status;
}
