/*
 * tests/worker/test_worker_publish.c - the publisher's batch caps when
 * Redis cannot be reached and the worker has given up (the end of a drain
 * that Redis did not let finish): lines are dropped, the batch never grows
 * past WORKER_PUB_BATCH_LINES / WORKER_PUB_BATCH_BYTES.
 */
#include "worker/publish.h"
#include "tests/support/harness.h"

#include <stdio.h>
#include <string.h>

int main(void)
{
	th_init("worker_publish");
	rn_redis_url_t url;
	memset(&url, 0, sizeof(url));
	snprintf(url.host, sizeof(url.host), "127.0.0.1");
	url.port = th_free_port(); /* nobody listens there */
	worker_stopword_t give_up;
	worker_stopword_init(&give_up);
	worker_stopword_give_up(&give_up);
	worker_pub_t p;
	TH_REQUIRE(worker_pub_init(&p, &url, "runnel", "run_pub", 1000, &give_up) == 0);

	/* Short lines: the line cap is reached before the byte cap. */
	static const char small[] = "{\"type\":\"log\",\"level\":\"info\",\"message\":\"x\"}";
	for (int i = 0; i < 3 * WORKER_PUB_BATCH_LINES; i++)
		worker_pub_add(&p, small, sizeof(small) - 1);
	TH_CHECK(worker_pub_pending(&p) <= WORKER_PUB_BATCH_LINES, "pending %zu lines",
	         worker_pub_pending(&p));
	TH_CHECK(p.published == 0);
	TH_CHECK(p.dropped + worker_pub_pending(&p) == 3 * WORKER_PUB_BATCH_LINES, "dropped %llu",
	         (unsigned long long)p.dropped);
	/* Once a line was dropped, nothing more is written, even when Redis
	 * would take it: a later line would leave a gap. */
	worker_stopword_init(&give_up);
	TH_CHECK(worker_pub_flush(&p) < 0, "flush after a drop fails");
	TH_CHECK(worker_pub_pump(&p) < 0, "pump after a drop fails");
	worker_pub_free(&p);

	/* Long lines: the byte cap. */
	worker_stopword_give_up(&give_up);
	TH_REQUIRE(worker_pub_init(&p, &url, "runnel", "run_pub", 1000, &give_up) == 0);
	static char big[64 * 1024];
	memset(big, 'a', sizeof(big));
	for (int i = 0; i < 64; i++)
		worker_pub_add(&p, big, sizeof(big));
	TH_CHECK(p.len <= WORKER_PUB_BATCH_BYTES + sizeof(big), "batch holds %zu bytes", p.len);
	worker_pub_free(&p);
	return th_done();
}
