/*
 * tests/cluster/test_rcluster_unit.c - common/rcluster's pure parts: the
 * key slot (Redis Cluster's published vectors), which arguments of a
 * command are keys, and the MOVED/ASK parser with hostile replies.
 */
#include <string.h>

#include "common/rcluster.h"
#include "tests/support/check.h"

static unsigned slot_of(const char *k)
{
	return rn_rcluster_key_slot(k, strlen(k));
}

static int cmd_slot(int argc, const char **argv)
{
	return rn_rcluster_command_slot(argc, argv, NULL);
}

static void test_key_slot(void)
{
	/* The cluster spec's CRC16 check value, and keys whose slots
	 * `CLUSTER KEYSLOT` reports (redis-server 7.0). */
	TH_CHECK(slot_of("123456789") == (0x31C3 & 0x3FFF), "crc16 vector: %u", slot_of("123456789"));
	TH_CHECK(slot_of("foo") == 12182, "foo: %u", slot_of("foo"));
	TH_CHECK(slot_of("bar") == 5061, "bar: %u", slot_of("bar"));
	TH_CHECK(slot_of("") == 0, "empty key");
	/* Hash tags: the first {...} that is not empty. */
	TH_CHECK(slot_of("{user1000}.following") == slot_of("{user1000}.followers"), "same tag");
	TH_CHECK(slot_of("{user1000}.following") == slot_of("user1000"), "tag alone");
	TH_CHECK(slot_of("foo{}{bar}") != slot_of("bar"), "empty first tag hashes the whole key");
	TH_CHECK(slot_of("foo{{bar}}zap") == slot_of("{bar"), "tag up to the first }");
	TH_CHECK(slot_of("foo{bar}{zap}") == slot_of("bar"), "first tag wins");
	TH_CHECK(slot_of("foo{bar") == rn_rcluster_key_slot("foo{bar", 7), "unclosed tag");
	/* Binary keys: the length, not a NUL, ends the key. */
	TH_CHECK(rn_rcluster_key_slot("a\0b", 3) != rn_rcluster_key_slot("a", 1), "binary key");
	/* runnel's keys: a run's state, output and control share a slot. */
	TH_CHECK(slot_of("runnel:{r-1}:out") == slot_of("runnel:{r-1}:state"), "run keys share a slot");
	for (unsigned i = 0; i < 1000; i++) {
		char k[32];
		snprintf(k, sizeof(k), "k%u", i * 7919u);
		TH_CHECK(slot_of(k) < RN_RCLUSTER_SLOTS, "slot in range");
	}
}

static void test_command_slot(void)
{
	const char *get[] = { "GET", "foo" };
	TH_CHECK(cmd_slot(2, get) == 12182, "GET key");
	const char *ping[] = { "PING" };
	TH_CHECK(cmd_slot(1, ping) == -1, "PING is keyless");
	const char *info[] = { "info", "cluster" };
	TH_CHECK(cmd_slot(2, info) == -1, "INFO is keyless (any case)");
	const char *wait[] = { "WAIT", "1", "100" };
	TH_CHECK(cmd_slot(3, wait) == -1, "WAIT is keyless");
	const char *eval[] = { "EVAL", "return 1", "2", "{r}:a", "{r}:b", "arg-not-a-key" };
	TH_CHECK(cmd_slot(6, eval) == (int)slot_of("r"), "EVAL keys");
	const char *eval0[] = { "EVAL", "return 1", "0", "foo" };
	TH_CHECK(cmd_slot(4, eval0) == -1, "EVAL without keys");
	const char *evalx[] = { "EVAL", "return 1", "2", "foo", "bar" };
	TH_CHECK(cmd_slot(5, evalx) == -2, "EVAL across slots");
	const char *evalbig[] = { "EVAL", "return 1", "99", "foo" };
	TH_CHECK(cmd_slot(4, evalbig) == 12182, "numkeys past argc is clamped");
	const char *xread[] = { "XREAD", "COUNT", "10", "BLOCK", "5", "STREAMS", "{a}1", "{a}2", "0-0", "$" };
	TH_CHECK(cmd_slot(10, xread) == (int)slot_of("a"), "XREAD streams");
	const char *xreadx[] = { "XREAD", "STREAMS", "foo", "bar", "0", "0" };
	TH_CHECK(cmd_slot(6, xreadx) == -2, "XREAD across slots");
	const char *xgroup[] = { "XGROUP", "CREATE", "foo", "g", "$" };
	TH_CHECK(cmd_slot(5, xgroup) == 12182, "XGROUP key is argv[2]");
	const char *del[] = { "DEL", "{t}x", "{t}y", "{t}z" };
	TH_CHECK(cmd_slot(4, del) == (int)slot_of("t"), "DEL keys");
	const char *delx[] = { "DEL", "foo", "bar" };
	TH_CHECK(cmd_slot(3, delx) == -2, "DEL across slots");
	const char *lens_argv[] = { "GET", "foo-ignored" };
	size_t lens[] = { 3, 3 };
	TH_CHECK(rn_rcluster_command_slot(2, lens_argv, lens) == 12182, "explicit lengths");
}

static void test_redirect(void)
{
	int slot = -1, port = -1;
	char host[64] = "";
	const char *m = "MOVED 3999 127.0.0.1:6381";
	TH_CHECK(rn_rcluster_parse_redirect(m, strlen(m), &slot, host, sizeof(host), &port) == 1, "MOVED");
	TH_CHECK(slot == 3999 && port == 6381 && strcmp(host, "127.0.0.1") == 0, "MOVED fields");
	const char *a = "ASK 16383 ::1:7000";
	TH_CHECK(rn_rcluster_parse_redirect(a, strlen(a), &slot, host, sizeof(host), &port) == 2, "ASK ipv6");
	TH_CHECK(slot == 16383 && port == 7000 && strcmp(host, "::1") == 0, "ASK fields");
	const char *bad[] = {
		"MOVED 16384 127.0.0.1:1",
		"MOVED  1 h:1",
		"MOVED 1 h:0",
		"MOVED 1 h:65536",
		"MOVED 1 h:",
		"MOVED 1 :6379",
		"MOVED 1 h6379",
		"MOVED 1",
		"MOVED x h:1",
		"MOVED 1 h:12x",
		"MOVED 1 a b:1",
		"ERR MOVED 1 h:1",
		"MOVED 1234567 h:1",
		"ASK",
		"MOVED 1 h:123456",
		"TRYAGAIN",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		slot = port = -7;
		TH_CHECK(rn_rcluster_parse_redirect(bad[i], strlen(bad[i]), &slot, host, sizeof(host), &port) == 0,
		         "refused: %s", bad[i]);
		TH_CHECK(slot == -7 && port == -7, "outputs untouched: %s", bad[i]);
	}
	/* A host that does not fit is refused, not cut. */
	char longm[200];
	snprintf(longm, sizeof(longm), "MOVED 1 %0100d:1", 0);
	TH_CHECK(rn_rcluster_parse_redirect(longm, strlen(longm), &slot, host, sizeof(host), &port) == 0,
	         "host longer than the buffer");
	/* The length bounds the parse: no reading past it. */
	TH_CHECK(rn_rcluster_parse_redirect(m, 12, &slot, host, sizeof(host), &port) == 0, "cut reply");
}

int main(void)
{
	test_key_slot();
	test_command_slot();
	test_redirect();
	return th_done();
}
