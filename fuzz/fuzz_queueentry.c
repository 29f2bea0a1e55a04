/*
 * fuzz/fuzz_queueentry.c - libFuzzer target for proto_queue_ref_parse():
 * run-time queue entries, which every worker of a fleet reads whoever wrote
 * them.  A reference read must write back and read back the same; a
 * refusal must say "ref: ...".
 */
#include "proto/queueentry.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	proto_queue_ref_t ref, back;
	char err[256];
	size_t len = 0;

	err[0] = '\0';
	int rc = proto_queue_ref_parse((const char *)data, size, &ref, err, sizeof(err));
	if (rc < 0) {
		if (strncmp(err, "ref: ", 5) != 0)
			__builtin_trap();
		return 0;
	}
	if (rc == 0)
		return 0;
	if (ref.partition < 0 || ref.offset < 0 || strlen(ref.topic) > PROTO_TOPIC_MAX)
		__builtin_trap();
	char *s = proto_queue_ref_write(&ref, &len);
	if (!s)
		return 0;
	if (proto_queue_ref_parse(s, len, &back, err, sizeof(err)) != 1 || strcmp(ref.topic, back.topic) != 0 ||
	    ref.partition != back.partition || ref.offset != back.offset)
		__builtin_trap();
	free(s);
	return 0;
}
