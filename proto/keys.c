/*
 * proto/keys.c - Redis key names for one run and the minting of run ids
 * (SPEC §3).  Pure string work plus libsodium's CSPRNG.
 */
#include "proto/keys.h"
#include "proto/job.h" /* proto_sodium_init */
#include "proto/names.h"

#include <stdio.h>
#include <string.h>

#include <sodium.h>

int proto_run_id_valid(const char *run_id)
{
	return proto_name_chars_ok(run_id, PROTO_RUN_ID_MAX, "_-");
}

int proto_key_prefix_valid(const char *prefix)
{
	return proto_name_chars_ok(prefix, PROTO_KEY_PREFIX_MAX, "_-.:");
}

int proto_key(char *buf, size_t size, const char *prefix,
              const char *run_id, proto_key_kind_t kind)
{
	const char *suffix;
	int n;

	if (!proto_key_prefix_valid(prefix) || !proto_run_id_valid(run_id))
		return -1;
	switch (kind) {
	case PROTO_KEY_OUT: suffix = "out"; break;
	case PROTO_KEY_CTL: suffix = "ctl"; break;
	case PROTO_KEY_STATE: suffix = "state"; break;
	case PROTO_KEY_WAKE: suffix = "wake"; break;
	default: return -1;
	}
	n = snprintf(buf, size, "%s:{%s}:%s", prefix, run_id, suffix);
	if (n < 0 || (size_t)n >= size)
		return -1;
	return n;
}

int proto_idem_redis_key(char *buf, size_t size, const char *prefix, const char *tenant, const char *key)
{
	int n;

	if (!proto_key_prefix_valid(prefix) || !proto_tenant_valid(tenant) || !proto_idem_key_valid(key))
		return -1;
	n = snprintf(buf, size, "%s:idem:{%s}:%s", prefix, tenant, key);
	if (n < 0 || (size_t)n >= size)
		return -1;
	return n;
}

void proto_run_id_mint(char buf[27])
{
	unsigned char raw[16];
	/* 16 bytes -> 22 base64 chars without padding, plus the NUL. */
	char b64[sodium_base64_ENCODED_LEN(16, sodium_base64_VARIANT_URLSAFE_NO_PADDING)];

	proto_sodium_init();
	randombytes_buf(raw, sizeof(raw));
	sodium_bin2base64(b64, sizeof(b64), raw, sizeof(raw),
	                  sodium_base64_VARIANT_URLSAFE_NO_PADDING);
	memcpy(buf, "run_", 4);
	memcpy(buf + 4, b64, 22);
	buf[26] = '\0';
	sodium_memzero(raw, sizeof(raw));
}
