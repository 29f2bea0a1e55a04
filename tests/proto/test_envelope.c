/*
 * tests/proto/test_envelope.c - the envelope rules of SPEC §4, both sides of
 * each: exact published line or exact replacement line and reason, the ts
 * stamping, the size cap, the step tracker and the drop after the terminal
 * line, and the builders for runner-written lines.
 */
#include "proto/envelope.h"
#include "tests/support/check.h"

#include <stdio.h>
#include <string.h>

#include <stdint.h>
#include <stdlib.h>

#define NOW 5

typedef struct env_case {
	const char *name;
	const char *in;
	size_t in_len;
	const char *want;   /* exact published line */
	const char *reason; /* NULL: the line is valid */
	proto_env_type_t type;
	int terminal;
} env_case_t;

static const env_case_t cases[] = {
	{ "log with ts kept",
	  "{\"type\":\"log\",\"level\":\"info\",\"message\":\"Loaded 3 skills\",\"ts\":1700000000000}", 76,
	  "{\"type\":\"log\",\"level\":\"info\",\"message\":\"Loaded 3 skills\",\"ts\":1700000000000}",
	  NULL, PROTO_ENV_LOG, 0 },
	{ "log without ts gets ts",
	  "{\"type\":\"log\",\"level\":\"info\",\"message\":\"hi\"}", 44,
	  "{\"type\":\"log\",\"level\":\"info\",\"message\":\"hi\",\"ts\":5}",
	  NULL, PROTO_ENV_LOG, 0 },
	{ "ts added before the brace, trailing blanks kept",
	  "{\"type\":\"log\",\"level\":\"info\",\"message\":\"hi\"}  ", 46,
	  "{\"type\":\"log\",\"level\":\"info\",\"message\":\"hi\",\"ts\":5}  ",
	  NULL, PROTO_ENV_LOG, 0 },
	{ "ts added with blanks before the brace",
	  "{ \"type\" : \"log\", \"level\":\"info\", \"message\":\"hi\" }", 50,
	  "{ \"type\" : \"log\", \"level\":\"info\", \"message\":\"hi\" ,\"ts\":5}",
	  NULL, PROTO_ENV_LOG, 0 },
	{ "trailing CR stripped",
	  "{\"type\":\"log\",\"level\":\"info\",\"message\":\"Loaded 3 skills\",\"ts\":1700000000000}\x0d"
	  "",
	  77,
	  "{\"type\":\"log\",\"level\":\"info\",\"message\":\"Loaded 3 skills\",\"ts\":1700000000000}",
	  NULL, PROTO_ENV_LOG, 0 },
	{ "leading blanks kept",
	  "  {\"type\":\"log\",\"level\":\"info\",\"message\":\"Loaded 3 skills\",\"ts\":1700000000000}", 78,
	  "  {\"type\":\"log\",\"level\":\"info\",\"message\":\"Loaded 3 skills\",\"ts\":1700000000000}",
	  NULL, PROTO_ENV_LOG, 0 },
	{ "ts zero kept",
	  "{\"type\":\"log\",\"level\":\"debug\",\"message\":\"m\",\"ts\":0}", 51,
	  "{\"type\":\"log\",\"level\":\"debug\",\"message\":\"m\",\"ts\":0}",
	  NULL, PROTO_ENV_LOG, 0 },
	{ "level debug",
	  "{\"type\":\"log\",\"level\":\"debug\",\"message\":\"m\",\"ts\":1}", 51,
	  "{\"type\":\"log\",\"level\":\"debug\",\"message\":\"m\",\"ts\":1}",
	  NULL, PROTO_ENV_LOG, 0 },
	{ "level info",
	  "{\"type\":\"log\",\"level\":\"info\",\"message\":\"m\",\"ts\":1}", 50,
	  "{\"type\":\"log\",\"level\":\"info\",\"message\":\"m\",\"ts\":1}",
	  NULL, PROTO_ENV_LOG, 0 },
	{ "level warn",
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"m\",\"ts\":1}", 50,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"m\",\"ts\":1}",
	  NULL, PROTO_ENV_LOG, 0 },
	{ "level error",
	  "{\"type\":\"log\",\"level\":\"error\",\"message\":\"m\",\"ts\":1}", 51,
	  "{\"type\":\"log\",\"level\":\"error\",\"message\":\"m\",\"ts\":1}",
	  NULL, PROTO_ENV_LOG, 0 },
	{ "unknown extra fields kept",
	  "{\"type\":\"log\",\"level\":\"info\",\"message\":\"m\",\"extra\":{\"a\":[1,2,{\"b\":null}]},\"x\":true,\"ts\":3}", 90,
	  "{\"type\":\"log\",\"level\":\"info\",\"message\":\"m\",\"extra\":{\"a\":[1,2,{\"b\":null}]},\"x\":true,\"ts\":3}",
	  NULL, PROTO_ENV_LOG, 0 },
	{ "nested objects kept, ts added",
	  "{\"type\":\"step\",\"id\":\"step_8f3\",\"name\":\"recipes/add-node.sh\",\"status\":\"running\",\"args\":{\"nodeType\":\"inference\",\"pos\":{\"x\":[1,2.5,{\"deep\":{\"er\":\"ok\"}}]}}}", 152,
	  "{\"type\":\"step\",\"id\":\"step_8f3\",\"name\":\"recipes/add-node.sh\",\"status\":\"running\",\"args\":{\"nodeType\":\"inference\",\"pos\":{\"x\":[1,2.5,{\"deep\":{\"er\":\"ok\"}}]}},\"ts\":5}",
	  NULL, PROTO_ENV_STEP, 0 },
	{ "step succeeded",
	  "{\"type\":\"step\",\"id\":\"s\",\"name\":\"n\",\"status\":\"succeeded\",\"result\":{\"nodeId\":\"node_1\"},\"durationMs\":412,\"ts\":7}", 109,
	  "{\"type\":\"step\",\"id\":\"s\",\"name\":\"n\",\"status\":\"succeeded\",\"result\":{\"nodeId\":\"node_1\"},\"durationMs\":412,\"ts\":7}",
	  NULL, PROTO_ENV_STEP, 0 },
	{ "step failed with error object",
	  "{\"type\":\"step\",\"id\":\"s\",\"name\":\"n\",\"status\":\"failed\",\"error\":{\"why\":\"x\"},\"ts\":7}", 80,
	  "{\"type\":\"step\",\"id\":\"s\",\"name\":\"n\",\"status\":\"failed\",\"error\":{\"why\":\"x\"},\"ts\":7}",
	  NULL, PROTO_ENV_STEP, 0 },
	{ "step failed with error false",
	  "{\"type\":\"step\",\"id\":\"s\",\"name\":\"n\",\"status\":\"failed\",\"error\":false,\"ts\":7}", 74,
	  "{\"type\":\"step\",\"id\":\"s\",\"name\":\"n\",\"status\":\"failed\",\"error\":false,\"ts\":7}",
	  NULL, PROTO_ENV_STEP, 0 },
	{ "unicode message kept as printed",
	  "{\"type\":\"log\",\"level\":\"info\",\"message\":\"caf\xc3"
	  "\xa9"
	  " \\u00e9 \xe2"
	  "\x98"
	  "\x83"
	  "\",\"ts\":1}",
	  65,
	  "{\"type\":\"log\",\"level\":\"info\",\"message\":\"caf\xc3"
	  "\xa9"
	  " \\u00e9 \xe2"
	  "\x98"
	  "\x83"
	  "\",\"ts\":1}",
	  NULL, PROTO_ENV_LOG, 0 },
	{ "result is terminal",
	  "{\"type\":\"result\",\"message\":\"Added an Inference node\",\"ts\":9}", 60,
	  "{\"type\":\"result\",\"message\":\"Added an Inference node\",\"ts\":9}",
	  NULL, PROTO_ENV_RESULT, 1 },
	{ "error is terminal, ts added",
	  "{\"type\":\"error\",\"code\":\"model_timeout\",\"message\":\"timed out\"}", 61,
	  "{\"type\":\"error\",\"code\":\"model_timeout\",\"message\":\"timed out\",\"ts\":5}",
	  NULL, PROTO_ENV_ERROR, 1 },
	{ "log bad level",
	  "{\"type\":\"log\",\"level\":\"fatal\",\"message\":\"m\"}", 44,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: log: bad level: {\\\"type\\\":\\\"log\\\",\\\"level\\\":\\\"fatal\\\",\\\"message\\\":\\\"m\\\"}\",\"ts\":5}",
	  "log: bad level", PROTO_ENV_LOG, 0 },
	{ "log missing level",
	  "{\"type\":\"log\",\"message\":\"m\"}", 28,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: log: missing level: {\\\"type\\\":\\\"log\\\",\\\"message\\\":\\\"m\\\"}\",\"ts\":5}",
	  "log: missing level", PROTO_ENV_LOG, 0 },
	{ "log level not a string",
	  "{\"type\":\"log\",\"level\":3,\"message\":\"m\"}", 38,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: log: level not a string: {\\\"type\\\":\\\"log\\\",\\\"level\\\":3,\\\"message\\\":\\\"m\\\"}\",\"ts\":5}",
	  "log: level not a string", PROTO_ENV_LOG, 0 },
	{ "log missing message",
	  "{\"type\":\"log\",\"level\":\"info\"}", 29,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: log: missing message: {\\\"type\\\":\\\"log\\\",\\\"level\\\":\\\"info\\\"}\",\"ts\":5}",
	  "log: missing message", PROTO_ENV_LOG, 0 },
	{ "log message not a string",
	  "{\"type\":\"log\",\"level\":\"info\",\"message\":null}", 44,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: log: message not a string: {\\\"type\\\":\\\"log\\\",\\\"level\\\":\\\"info\\\",\\\"message\\\":null}\",\"ts\":5}",
	  "log: message not a string", PROTO_ENV_LOG, 0 },
	{ "step failed without error",
	  "{\"type\":\"step\",\"id\":\"s\",\"name\":\"n\",\"status\":\"failed\"}", 53,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: step: failed without error: {\\\"type\\\":\\\"step\\\",\\\"id\\\":\\\"s\\\",\\\"name\\\":\\\"n\\\",\\\"status\\\":\\\"failed\\\"}\",\"ts\":5}",
	  "step: failed without error", PROTO_ENV_LOG, 0 },
	{ "step failed with null error",
	  "{\"type\":\"step\",\"id\":\"s\",\"name\":\"n\",\"status\":\"failed\",\"error\":null}", 66,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: step: failed without error: {\\\"type\\\":\\\"step\\\",\\\"id\\\":\\\"s\\\",\\\"name\\\":\\\"n\\\",\\\"status\\\":\\\"failed\\\",\\\"error\\\":nul\",\"ts\":5}",
	  "step: failed without error", PROTO_ENV_LOG, 0 },
	{ "step bad status",
	  "{\"type\":\"step\",\"id\":\"s\",\"name\":\"n\",\"status\":\"done\"}", 51,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: step: bad status: {\\\"type\\\":\\\"step\\\",\\\"id\\\":\\\"s\\\",\\\"name\\\":\\\"n\\\",\\\"status\\\":\\\"done\\\"}\",\"ts\":5}",
	  "step: bad status", PROTO_ENV_LOG, 0 },
	{ "step missing id",
	  "{\"type\":\"step\",\"name\":\"n\",\"status\":\"running\"}", 45,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: step: missing id: {\\\"type\\\":\\\"step\\\",\\\"name\\\":\\\"n\\\",\\\"status\\\":\\\"running\\\"}\",\"ts\":5}",
	  "step: missing id", PROTO_ENV_LOG, 0 },
	{ "step id not a string",
	  "{\"type\":\"step\",\"id\":7,\"name\":\"n\",\"status\":\"running\"}", 52,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: step: id not a string: {\\\"type\\\":\\\"step\\\",\\\"id\\\":7,\\\"name\\\":\\\"n\\\",\\\"status\\\":\\\"running\\\"}\",\"ts\":5}",
	  "step: id not a string", PROTO_ENV_LOG, 0 },
	{ "step missing name",
	  "{\"type\":\"step\",\"id\":\"s\",\"status\":\"running\"}", 43,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: step: missing name: {\\\"type\\\":\\\"step\\\",\\\"id\\\":\\\"s\\\",\\\"status\\\":\\\"running\\\"}\",\"ts\":5}",
	  "step: missing name", PROTO_ENV_LOG, 0 },
	{ "step missing status",
	  "{\"type\":\"step\",\"id\":\"s\",\"name\":\"n\"}", 35,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: step: missing status: {\\\"type\\\":\\\"step\\\",\\\"id\\\":\\\"s\\\",\\\"name\\\":\\\"n\\\"}\",\"ts\":5}",
	  "step: missing status", PROTO_ENV_LOG, 0 },
	{ "step status not a string",
	  "{\"type\":\"step\",\"id\":\"s\",\"name\":\"n\",\"status\":1}", 46,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: step: status not a string: {\\\"type\\\":\\\"step\\\",\\\"id\\\":\\\"s\\\",\\\"name\\\":\\\"n\\\",\\\"status\\\":1}\",\"ts\":5}",
	  "step: status not a string", PROTO_ENV_LOG, 0 },
	{ "result missing message",
	  "{\"type\":\"result\",\"ts\":1}", 24,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: result: missing message: {\\\"type\\\":\\\"result\\\",\\\"ts\\\":1}\",\"ts\":5}",
	  "result: missing message", PROTO_ENV_LOG, 0 },
	{ "result message not a string",
	  "{\"type\":\"result\",\"message\":{}}", 30,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: result: message not a string: {\\\"type\\\":\\\"result\\\",\\\"message\\\":{}}\",\"ts\":5}",
	  "result: message not a string", PROTO_ENV_LOG, 0 },
	{ "error missing code",
	  "{\"type\":\"error\",\"message\":\"m\"}", 30,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: error: missing code: {\\\"type\\\":\\\"error\\\",\\\"message\\\":\\\"m\\\"}\",\"ts\":5}",
	  "error: missing code", PROTO_ENV_LOG, 0 },
	{ "error code not a string",
	  "{\"type\":\"error\",\"code\":1,\"message\":\"m\"}", 39,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: error: code not a string: {\\\"type\\\":\\\"error\\\",\\\"code\\\":1,\\\"message\\\":\\\"m\\\"}\",\"ts\":5}",
	  "error: code not a string", PROTO_ENV_LOG, 0 },
	{ "error missing message",
	  "{\"type\":\"error\",\"code\":\"c\"}", 27,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: error: missing message: {\\\"type\\\":\\\"error\\\",\\\"code\\\":\\\"c\\\"}\",\"ts\":5}",
	  "error: missing message", PROTO_ENV_LOG, 0 },
	{ "missing type",
	  "{\"level\":\"info\",\"message\":\"m\"}", 30,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: missing type: {\\\"level\\\":\\\"info\\\",\\\"message\\\":\\\"m\\\"}\",\"ts\":5}",
	  "missing type", PROTO_ENV_LOG, 0 },
	{ "type not a string",
	  "{\"type\":[\"log\"],\"message\":\"m\"}", 30,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: type not a string: {\\\"type\\\":[\\\"log\\\"],\\\"message\\\":\\\"m\\\"}\",\"ts\":5}",
	  "type not a string", PROTO_ENV_LOG, 0 },
	{ "unknown type",
	  "{\"type\":\"x\"}", 12,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: unknown type \\\"x\\\": {\\\"type\\\":\\\"x\\\"}\",\"ts\":5}",
	  "unknown type \"x\"", PROTO_ENV_LOG, 0 },
	{ "unknown type cut to 32 bytes",
	  "{\"type\":\"abcdefghijklmnopqrstuvwxyz0123456789\"}", 47,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: unknown type \\\"abcdefghijklmnopqrstuvwxyz012345\\\": {\\\"type\\\":\\\"abcdefghijklmnopqrstuvwxyz0123456789\\\"}\",\"ts\":5}",
	  "unknown type \"abcdefghijklmnopqrstuvwxyz012345\"", PROTO_ENV_LOG, 0 },
	{ "not JSON",
	  "hello world", 11,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: not JSON: hello world\",\"ts\":5}",
	  "not JSON", PROTO_ENV_LOG, 0 },
	{ "not a JSON object (array)",
	  "[1,2]", 5,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: not a JSON object: [1,2]\",\"ts\":5}",
	  "not a JSON object", PROTO_ENV_LOG, 0 },
	{ "not a JSON object (string)",
	  "\"str\"", 5,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: not a JSON object: \\\"str\\\"\",\"ts\":5}",
	  "not a JSON object", PROTO_ENV_LOG, 0 },
	{ "not a JSON object (number)",
	  "42", 2,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: not a JSON object: 42\",\"ts\":5}",
	  "not a JSON object", PROTO_ENV_LOG, 0 },
	{ "truncated JSON",
	  "{\"type\":\"log\"", 13,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: not JSON: {\\\"type\\\":\\\"log\\\"\",\"ts\":5}",
	  "not JSON", PROTO_ENV_LOG, 0 },
	{ "trailing garbage",
	  "{\"type\":\"log\",\"level\":\"info\",\"message\":\"m\"} x", 45,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: not JSON: {\\\"type\\\":\\\"log\\\",\\\"level\\\":\\\"info\\\",\\\"message\\\":\\\"m\\\"} x\",\"ts\":5}",
	  "not JSON", PROTO_ENV_LOG, 0 },
	{ "two objects on one line",
	  "{\"type\":\"log\",\"level\":\"info\",\"message\":\"m\"}{}", 45,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: not JSON: {\\\"type\\\":\\\"log\\\",\\\"level\\\":\\\"info\\\",\\\"message\\\":\\\"m\\\"}{}\",\"ts\":5}",
	  "not JSON", PROTO_ENV_LOG, 0 },
	{ "blank line",
	  "   ", 3,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: not JSON:    \",\"ts\":5}",
	  "not JSON", PROTO_ENV_LOG, 0 },
	{ "duplicate key",
	  "{\"type\":\"log\",\"type\":\"result\",\"level\":\"info\",\"message\":\"m\"}", 59,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: duplicate key: {\\\"type\\\":\\\"log\\\",\\\"type\\\":\\\"result\\\",\\\"level\\\":\\\"info\\\",\\\"message\\\":\\\"m\\\"}\",\"ts\":5}",
	  "duplicate key", PROTO_ENV_LOG, 0 },
	{ "ts negative",
	  "{\"type\":\"log\",\"level\":\"info\",\"message\":\"m\",\"ts\":-1}", 51,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: ts: not a non-negative integer: {\\\"type\\\":\\\"log\\\",\\\"level\\\":\\\"info\\\",\\\"message\\\":\\\"m\\\",\\\"ts\\\":-1}\",\"ts\":5}",
	  "ts: not a non-negative integer", PROTO_ENV_LOG, 0 },
	{ "ts real",
	  "{\"type\":\"log\",\"level\":\"info\",\"message\":\"m\",\"ts\":1.5}", 52,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: ts: not a non-negative integer: {\\\"type\\\":\\\"log\\\",\\\"level\\\":\\\"info\\\",\\\"message\\\":\\\"m\\\",\\\"ts\\\":1.5}\",\"ts\":5}",
	  "ts: not a non-negative integer", PROTO_ENV_LOG, 0 },
	{ "ts string",
	  "{\"type\":\"log\",\"level\":\"info\",\"message\":\"m\",\"ts\":\"1\"}", 52,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: ts: not a non-negative integer: {\\\"type\\\":\\\"log\\\",\\\"level\\\":\\\"info\\\",\\\"message\\\":\\\"m\\\",\\\"ts\\\":\\\"1\\\"}\",\"ts\":5}",
	  "ts: not a non-negative integer", PROTO_ENV_LOG, 0 },
	{ "ts null",
	  "{\"type\":\"log\",\"level\":\"info\",\"message\":\"m\",\"ts\":null}", 53,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: ts: not a non-negative integer: {\\\"type\\\":\\\"log\\\",\\\"level\\\":\\\"info\\\",\\\"message\\\":\\\"m\\\",\\\"ts\\\":null}\",\"ts\":5}",
	  "ts: not a non-negative integer", PROTO_ENV_LOG, 0 },
	{ "number out of range",
	  "{\"type\":\"log\",\"level\":\"info\",\"message\":\"m\",\"ts\":99999999999999999999}", 69,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: number out of range: {\\\"type\\\":\\\"log\\\",\\\"level\\\":\\\"info\\\",\\\"message\\\":\\\"m\\\",\\\"ts\\\":9999999999999999\",\"ts\":5}",
	  "number out of range", PROTO_ENV_LOG, 0 },
	{ "invalid UTF-8",
	  "{\"type\":\"log\",\"level\":\"info\",\"message\":\"\xff"
	  "\xfe"
	  "\"}",
	  44,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: invalid UTF-8: {\\\"type\\\":\\\"log\\\",\\\"level\\\":\\\"info\\\",\\\"message\\\":\\\"\xef"
	  "\xbf"
	  "\xbd"
	  "\xef"
	  "\xbf"
	  "\xbd"
	  "\\\"}\",\"ts\":5}",
	  "invalid UTF-8", PROTO_ENV_LOG, 0 },
	{ "invalid UTF-8 overlong",
	  "{\"type\":\"log\",\"level\":\"info\",\"message\":\"\xc0"
	  "\xaf"
	  "\"}",
	  44,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: invalid UTF-8: {\\\"type\\\":\\\"log\\\",\\\"level\\\":\\\"info\\\",\\\"message\\\":\\\"\xef"
	  "\xbf"
	  "\xbd"
	  "\xef"
	  "\xbf"
	  "\xbd"
	  "\\\"}\",\"ts\":5}",
	  "invalid UTF-8", PROTO_ENV_LOG, 0 },
	{ "invalid UTF-8 surrogate",
	  "{\"type\":\"log\",\"level\":\"info\",\"message\":\"\xed"
	  "\xa0"
	  "\x80"
	  "\"}",
	  45,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: invalid UTF-8: {\\\"type\\\":\\\"log\\\",\\\"level\\\":\\\"info\\\",\\\"message\\\":\\\"\xef"
	  "\xbf"
	  "\xbd"
	  "\xef"
	  "\xbf"
	  "\xbd"
	  "\xef"
	  "\xbf"
	  "\xbd"
	  "\\\"}\",\"ts\":5}",
	  "invalid UTF-8", PROTO_ENV_LOG, 0 },
	{ "escaped NUL rejected",
	  "{\"type\":\"log\",\"level\":\"info\",\"message\":\"a\\u0000b\"}", 50,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: contains a NUL byte: {\\\"type\\\":\\\"log\\\",\\\"level\\\":\\\"info\\\",\\\"message\\\":\\\"a\\\\u0000b\\\"}\",\"ts\":5}",
	  "contains a NUL byte", PROTO_ENV_LOG, 0 },
	{ "raw NUL byte",
	  "{\"type\":\"log\",\"level\":\"info\",\"message\":\"a\x00"
	  "b\"}",
	  45,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: contains a NUL byte: {\\\"type\\\":\\\"log\\\",\\\"level\\\":\\\"info\\\",\\\"message\\\":\\\"a\xef"
	  "\xbf"
	  "\xbd"
	  "b\\\"}\",\"ts\":5}",
	  "contains a NUL byte", PROTO_ENV_LOG, 0 },
	{ "invalid line with CR: echo without the CR",
	  "oops\x0d"
	  "",
	  5,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: not JSON: oops\",\"ts\":5}",
	  "not JSON", PROTO_ENV_LOG, 0 },
	{ "echo escapes quotes and backslashes and controls",
	  "nope \"q\" \\ \x09"
	  "\x01"
	  "",
	  13,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: not JSON: nope \\\"q\\\" \\\\ \\t\\u0001\",\"ts\":5}",
	  "not JSON", PROTO_ENV_LOG, 0 },
	{ "echo cut at a character boundary",
	  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\xc3"
	  "\xa9"
	  " tail",
	  70,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: not JSON: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\",\"ts\":5}",
	  "not JSON", PROTO_ENV_LOG, 0 },
	{ "echo quotes at most 64 bytes",
	  "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", 100,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: not JSON: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\",\"ts\":5}",
	  "not JSON", PROTO_ENV_LOG, 0 },
	{ "echo replaces bad bytes",
	  "\xff"
	  "aaaaaaaaaa",
	  11,
	  "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: invalid UTF-8: \xef"
	  "\xbf"
	  "\xbd"
	  "aaaaaaaaaa\",\"ts\":5}",
	  "invalid UTF-8", PROTO_ENV_LOG, 0 },
};

static void run_table(void)
{
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const env_case_t *c = &cases[i];
		proto_env_t *env = proto_env_new(0);
		proto_env_line_t out;

		proto_env_process(env, c->in, c->in_len, NOW, &out);
		TH_CHECK(out.action == PROTO_ENV_PUBLISH, "%s: action", c->name);
		TH_CHECK_MEM(c->name, out.text, out.len, c->want);
		TH_CHECK(out.valid == (!c->reason), "%s: valid=%d", c->name, out.valid);
		TH_CHECK_STR(c->name, out.reason, c->reason ? c->reason : "");
		TH_CHECK(out.type == c->type, "%s: type %d", c->name, (int)out.type);
		TH_CHECK(out.terminal == c->terminal, "%s: terminal", c->name);
		TH_CHECK(proto_env_terminated(env) == c->terminal, "%s: terminated", c->name);
		proto_env_free(env);
		/* What is published (a replacement too) is itself a valid line. */
		env = proto_env_new(0);
		{
			proto_env_line_t again;
			size_t len = strlen(c->want);

			proto_env_process(env, c->want, len, NOW, &again);
			TH_CHECK(again.valid && again.len == len, "%s: output re-validates: %s", c->name,
			         again.reason);
		}
		proto_env_free(env);
	}
	printf("envelope table: %zu cases\n", sizeof(cases) / sizeof(cases[0]));
}

/* Builds a valid log line of exactly len bytes (len >= 60). */
static char *log_line_of(size_t len)
{
	static const char head[] = "{\"type\":\"log\",\"level\":\"info\",\"message\":\"";
	static const char tail[] = "\",\"ts\":1}";
	char *p = malloc(len + 1);
	size_t pad = len - (sizeof(head) - 1) - (sizeof(tail) - 1);

	memcpy(p, head, sizeof(head) - 1);
	memset(p + sizeof(head) - 1, 'a', pad);
	memcpy(p + sizeof(head) - 1 + pad, tail, sizeof(tail));
	return p;
}

static void test_size_cap(void)
{
	proto_env_t *env = proto_env_new(0);
	proto_env_line_t out;
	char *big = log_line_of(2 * 1024 * 1024);
	char *max = log_line_of(PROTO_ENV_LINE_MAX_DEFAULT);
	char want[512];

	proto_env_process(env, big, 2 * 1024 * 1024, NOW, &out);
	TH_CHECK_STR("2 MB reason", out.reason, "line too long (2097152 bytes > 1048576)");
	/* The echo is the first 64 bytes: the 40-byte head and 24 of the a's. */
	snprintf(want, sizeof(want),
	         "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"invalid agent output: "
	         "line too long (2097152 bytes > 1048576): "
	         "{\\\"type\\\":\\\"log\\\",\\\"level\\\":\\\"info\\\",\\\"message\\\":\\\"%s\",\"ts\":5}",
	         "aaaaaaaaaaaaaaaaaaaaaaaa");
	TH_CHECK_MEM("2 MB line", out.text, out.len, want);
	TH_CHECK(!out.valid, "2 MB invalid");

	/* Exactly at the cap: valid and published unchanged. */
	proto_env_process(env, max, PROTO_ENV_LINE_MAX_DEFAULT, NOW, &out);
	TH_CHECK(out.valid && out.len == PROTO_ENV_LINE_MAX_DEFAULT &&
	                 memcmp(out.text, max, out.len) == 0,
	         "1 MiB line kept: %s", out.reason);
	/* Exactly at the cap plus a CR: still valid. */
	max = realloc(max, PROTO_ENV_LINE_MAX_DEFAULT + 1);
	max[PROTO_ENV_LINE_MAX_DEFAULT] = '\r';
	proto_env_process(env, max, PROTO_ENV_LINE_MAX_DEFAULT + 1, NOW, &out);
	TH_CHECK(out.valid && out.len == PROTO_ENV_LINE_MAX_DEFAULT, "1 MiB line + CR kept");
	proto_env_free(env);
	free(big);
	free(max);

	/* A configured cap, one byte over. */
	env = proto_env_new(100);
	big = log_line_of(101);
	proto_env_process(env, big, 100, NOW, &out);
	TH_CHECK(!out.valid, "100 bytes of a 101-byte line is not JSON");
	TH_CHECK_STR("cap 100 cut", out.reason, "not JSON");
	proto_env_process(env, big, 101, NOW, &out);
	TH_CHECK_STR("cap 100", out.reason, "line too long (101 bytes > 100)");
	free(big);
	big = log_line_of(100);
	proto_env_process(env, big, 100, NOW, &out);
	TH_CHECK(out.valid, "100-byte line under cap 100: %s", out.reason);
	free(big);
	/* Adding ts may take a line past the cap: it is still published whole. */
	big = log_line_of(100);
	memcpy(big + 100 - 9, "\"}       ", 9); /* drop the ts, pad with blanks */
	proto_env_process(env, big, 100, 1700000000000LL, &out);
	TH_CHECK(out.valid && out.len == 100 + 19, "ts added at the cap: %zu %s", out.len, out.reason);
	free(big);
	proto_env_free(env);
}

static void test_deep_nesting(void)
{
	proto_env_t *env = proto_env_new(0);
	proto_env_line_t out;
	size_t n = 5000, i;
	char *line = malloc(2 * n + 64);
	size_t len = 0;

	len += (size_t)snprintf(line, 64, "{\"type\":\"log\",\"x\":");
	for (i = 0; i < n; i++)
		line[len++] = '[';
	for (i = 0; i < n; i++)
		line[len++] = ']';
	line[len++] = '}';
	proto_env_process(env, line, len, NOW, &out);
	TH_CHECK_STR("deep nesting", out.reason, "not JSON");
	free(line);
	proto_env_free(env);
}

typedef struct collect {
	char lines[8][256];
	size_t n;
	size_t stop_at; /* refuse the line with this index (1-based), 0 = never */
} collect_t;

static int collect_emit(const char *line, size_t len, void *arg)
{
	collect_t *c = arg;

	if (c->stop_at != 0 && c->n + 1 == c->stop_at)
		return 1;
	if (c->n < 8 && len < sizeof(c->lines[0])) {
		memcpy(c->lines[c->n], line, len);
		c->lines[c->n][len] = '\0';
	}
	c->n++;
	return 0;
}

static void feed(proto_env_t *env, const char *line, proto_env_line_t *out)
{
	proto_env_process(env, line, strlen(line), NOW, out);
}

static void test_steps(void)
{
	proto_env_t *env = proto_env_new(0);
	proto_env_line_t out;
	collect_t c;
	size_t n;
	char line[128];
	int i;

	feed(env, "{\"type\":\"step\",\"id\":\"s1\",\"name\":\"a\",\"status\":\"running\"}", &out);
	TH_CHECK(out.valid && out.type == PROTO_ENV_STEP, "s1 running");
	feed(env, "{\"type\":\"step\",\"id\":\"s2\",\"name\":\"b \\\"q\\\"\",\"status\":\"running\"}", &out);
	feed(env, "{\"type\":\"step\",\"id\":\"s3\",\"name\":\"c\",\"status\":\"running\"}", &out);
	TH_CHECK(proto_env_open_steps(env) == 3, "3 open");
	/* Running again does not open a second entry. */
	feed(env, "{\"type\":\"step\",\"id\":\"s1\",\"name\":\"a2\",\"status\":\"running\"}", &out);
	TH_CHECK(proto_env_open_steps(env) == 3, "still 3 open");
	feed(env, "{\"type\":\"step\",\"id\":\"s2\",\"name\":\"b\",\"status\":\"succeeded\"}", &out);
	TH_CHECK(proto_env_open_steps(env) == 2, "s2 closed");
	/* An invalid step line does not touch the tracker. */
	feed(env, "{\"type\":\"step\",\"id\":\"s1\",\"name\":\"a\",\"status\":\"failed\"}", &out);
	TH_CHECK(!out.valid && proto_env_open_steps(env) == 2, "invalid failed keeps s1");
	/* Closing an id never opened is harmless. */
	feed(env, "{\"type\":\"step\",\"id\":\"zz\",\"name\":\"a\",\"status\":\"succeeded\"}", &out);
	TH_CHECK(out.valid && proto_env_open_steps(env) == 2, "unknown id");

	/* A terminal line leaves the steps open for the caller to close first. */
	feed(env, "{\"type\":\"result\",\"message\":\"done\",\"ts\":1}", &out);
	TH_CHECK(out.terminal && proto_env_open_steps(env) == 2, "result keeps steps");

	memset(&c, 0, sizeof(c));
	n = proto_env_close_steps(env, 9, "agent exited", collect_emit, &c);
	TH_CHECK(n == 2 && c.n == 2, "closed %zu", n);
	TH_CHECK_STR("close 1", c.lines[0],
	             "{\"type\":\"step\",\"id\":\"s1\",\"name\":\"a\",\"status\":\"failed\",\"error\":\"agent exited\",\"ts\":9}");
	TH_CHECK_STR("close 2", c.lines[1],
	             "{\"type\":\"step\",\"id\":\"s3\",\"name\":\"c\",\"status\":\"failed\",\"error\":\"agent exited\",\"ts\":9}");
	TH_CHECK_MEM("terminal text intact", out.text, out.len, "{\"type\":\"result\",\"message\":\"done\",\"ts\":1}");
	TH_CHECK(proto_env_open_steps(env) == 0, "none open");
	proto_env_free(env);

	/* failed closes; escaping in close lines; emit refusing keeps steps open. */
	env = proto_env_new(0);
	feed(env, "{\"type\":\"step\",\"id\":\"a\",\"name\":\"n \\\"q\\\"\",\"status\":\"running\"}", &out);
	feed(env, "{\"type\":\"step\",\"id\":\"b\",\"name\":\"n\",\"status\":\"running\"}", &out);
	feed(env, "{\"type\":\"step\",\"id\":\"c\",\"name\":\"n\",\"status\":\"running\"}", &out);
	feed(env, "{\"type\":\"step\",\"id\":\"c\",\"name\":\"n\",\"status\":\"failed\",\"error\":\"x\"}", &out);
	TH_CHECK(proto_env_open_steps(env) == 2, "failed closes c");
	memset(&c, 0, sizeof(c));
	c.stop_at = 2;
	n = proto_env_close_steps(env, 9, "cancelled \"now\"", collect_emit, &c);
	TH_CHECK(n == 1 && proto_env_open_steps(env) == 1, "stopped after 1: %zu", n);
	TH_CHECK_STR("close escaped", c.lines[0],
	             "{\"type\":\"step\",\"id\":\"a\",\"name\":\"n \\\"q\\\"\",\"status\":\"failed\",\"error\":\"cancelled \\\"now\\\"\",\"ts\":9}");
	memset(&c, 0, sizeof(c));
	n = proto_env_close_steps(env, 10, NULL, collect_emit, &c);
	TH_CHECK(n == 1, "retry closes b");
	TH_CHECK_STR("default why", c.lines[0],
	             "{\"type\":\"step\",\"id\":\"b\",\"name\":\"n\",\"status\":\"failed\",\"error\":\"run ended\",\"ts\":10}");
	proto_env_free(env);

	/* Over the cap the oldest open step is forgotten. */
	env = proto_env_new(0);
	for (i = 0; i <= PROTO_ENV_STEPS_MAX; i++) {
		snprintf(line, sizeof(line),
		         "{\"type\":\"step\",\"id\":\"s%d\",\"name\":\"n\",\"status\":\"running\"}", i);
		feed(env, line, &out);
	}
	TH_CHECK(proto_env_open_steps(env) == PROTO_ENV_STEPS_MAX, "cap %zu", proto_env_open_steps(env));
	memset(&c, 0, sizeof(c));
	n = proto_env_close_steps(env, 1, "x", collect_emit, &c);
	TH_CHECK(n == PROTO_ENV_STEPS_MAX, "closed all");
	TH_CHECK_STR("oldest kept is s1", c.lines[0],
	             "{\"type\":\"step\",\"id\":\"s1\",\"name\":\"n\",\"status\":\"failed\",\"error\":\"x\",\"ts\":1}");
	proto_env_free(env);
}

static void test_drop_after_terminal(void)
{
	proto_env_t *env = proto_env_new(0);
	proto_env_line_t out;

	/* An invalid result is not terminal. */
	feed(env, "{\"type\":\"result\"}", &out);
	TH_CHECK(!out.terminal && !proto_env_terminated(env), "invalid result");
	feed(env, "{\"type\":\"error\",\"code\":\"x\",\"message\":\"boom\"}", &out);
	TH_CHECK(out.terminal && out.action == PROTO_ENV_PUBLISH, "error terminal");
	feed(env, "{\"type\":\"log\",\"level\":\"info\",\"message\":\"late\"}", &out);
	TH_CHECK(out.action == PROTO_ENV_DROP && !out.text && out.len == 0, "dropped 1");
	feed(env, "garbage", &out);
	TH_CHECK(out.action == PROTO_ENV_DROP, "garbage dropped");
	feed(env, "{\"type\":\"result\",\"message\":\"again\"}", &out);
	TH_CHECK(out.action == PROTO_ENV_DROP && !out.terminal, "second terminal dropped");
	TH_CHECK(proto_env_dropped(env) == 3, "dropped %llu", (unsigned long long)proto_env_dropped(env));
	proto_env_free(env);

	env = proto_env_new(0);
	TH_CHECK(proto_env_dropped(env) == 0 && !proto_env_terminated(env), "fresh");
	proto_env_set_terminated(env);
	feed(env, "{\"type\":\"log\",\"level\":\"info\",\"message\":\"late\"}", &out);
	TH_CHECK(out.action == PROTO_ENV_DROP && proto_env_dropped(env) == 1, "set_terminated drops");
	proto_env_free(env);
}

/* An ask line that must be refused with the reason given. */
static void ask_bad(proto_env_t *env, const char *line, const char *want_reason)
{
	proto_env_line_t out;

	feed(env, line, &out);
	TH_CHECK(!out.valid && strcmp(out.reason, want_reason) == 0, "%s: reason \"%s\", want \"%s\"",
	         line, out.reason, want_reason);
}

#define ASK_OPTS "\"options\":[{\"id\":\"allow_once\",\"label\":\"Allow\"},{\"id\":\"reject_once\",\"label\":\"Reject\"}]"

static void test_asks(void)
{
	proto_env_t *env = proto_env_new(0);
	proto_env_line_t out;
	collect_t c;
	char *line = NULL;
	size_t len = 0;
	int64_t opened = 0;

	/* Refused unless the run's permission_mode is ask. */
	ask_bad(env, "{\"type\":\"ask\",\"id\":\"a1\",\"kind\":\"permission\",\"status\":\"open\"," ASK_OPTS "}",
	        "ask: the run's permission_mode is not ask");
	proto_env_allow_asks(env, 1);
	ask_bad(env, "{\"type\":\"ask\",\"kind\":\"permission\",\"status\":\"open\"}", "ask: missing id");
	ask_bad(env, "{\"type\":\"ask\",\"id\":\"a 1\",\"kind\":\"permission\",\"status\":\"open\"}", "ask: bad id");
	ask_bad(env, "{\"type\":\"ask\",\"id\":\"a1\",\"kind\":\"vote\",\"status\":\"open\"}", "ask: bad kind");
	ask_bad(env, "{\"type\":\"ask\",\"id\":\"a1\",\"kind\":\"permission\",\"status\":\"answered\"," ASK_OPTS "}",
	        "ask: status must be open");
	ask_bad(env, "{\"type\":\"ask\",\"id\":\"a1\",\"kind\":\"permission\",\"status\":\"open\"}",
	        "ask: options must be a non-empty array");
	ask_bad(env, "{\"type\":\"ask\",\"id\":\"a1\",\"kind\":\"permission\",\"status\":\"open\",\"options\":[{\"id\":\"x\"}]}",
	        "ask: an option needs an id and a label");
	ask_bad(env, "{\"type\":\"ask\",\"id\":\"a1\",\"kind\":\"question\",\"status\":\"open\"}",
	        "ask: question missing or not a string");
	ask_bad(env, "{\"type\":\"ask\",\"id\":\"a1\",\"kind\":\"question\",\"question\":\"q\",\"title\":1,\"status\":\"open\"}",
	        "ask: title not a string");
	TH_CHECK(proto_env_open_asks(env) == 0, "nothing tracked");

	feed(env, "{\"type\":\"ask\",\"id\":\"a1\",\"kind\":\"permission\",\"title\":\"Run: ls\",\"status\":\"open\"," ASK_OPTS "}", &out);
	TH_CHECK(out.valid && out.type == PROTO_ENV_ASK && !out.terminal, "a1 valid: %s", out.reason);
	feed(env, "{\"type\":\"ask\",\"id\":\"q1\",\"kind\":\"question\",\"question\":\"Which?\",\"status\":\"open\",\"ts\":7}", &out);
	TH_CHECK(out.valid, "q1 valid: %s", out.reason);
	TH_CHECK(proto_env_open_asks(env) == 2, "2 open");
	ask_bad(env, "{\"type\":\"ask\",\"id\":\"a1\",\"kind\":\"question\",\"question\":\"q\",\"status\":\"open\"}",
	        "ask: id already used");
	TH_CHECK(strcmp(proto_env_oldest_ask(env, &opened), "a1") == 0 && opened == NOW, "oldest a1");

	TH_CHECK(proto_env_settle_ask(env, "zz", "rejected", NULL, NULL, 9, &line, &len) == PROTO_ASK_UNKNOWN, "unknown");
	TH_CHECK(proto_env_settle_ask(env, "a1", "answered", "always", NULL, 9, &line, &len) == PROTO_ASK_BAD_OPTION,
	         "foreign option");
	TH_CHECK(proto_env_settle_ask(env, "a1", "answered", "allow_once", NULL, 9, &line, &len) == PROTO_ASK_SETTLED,
	         "settled");
	TH_CHECK_STR("settlement", line,
	             "{\"type\":\"ask\",\"id\":\"a1\",\"kind\":\"permission\",\"title\":\"Run: ls\",\"status\":\"answered\",\"option\":\"allow_once\",\"ts\":9}");
	free(line);
	TH_CHECK(proto_env_settle_ask(env, "a1", "rejected", NULL, NULL, 9, &line, &len) == PROTO_ASK_CLOSED, "closed");
	ask_bad(env, "{\"type\":\"ask\",\"id\":\"a1\",\"kind\":\"question\",\"question\":\"q\",\"status\":\"open\"}",
	        "ask: id already used");
	TH_CHECK(strcmp(proto_env_oldest_ask(env, NULL), "q1") == 0, "oldest q1");
	TH_CHECK(proto_env_settle_ask(env, "q1", "answered", NULL, "the \"red\" one", 10, &line, &len) == PROTO_ASK_SETTLED,
	         "text");
	TH_CHECK_STR("text settlement", line,
	             "{\"type\":\"ask\",\"id\":\"q1\",\"kind\":\"question\",\"status\":\"answered\",\"text\":\"the \\\"red\\\" one\",\"ts\":10}");
	free(line);
	TH_CHECK(!proto_env_oldest_ask(env, NULL) && proto_env_open_asks(env) == 0, "none open");

	/* The end of a run rejects what is open; a refusing emit keeps it open. */
	feed(env, "{\"type\":\"ask\",\"id\":\"b1\",\"kind\":\"question\",\"question\":\"?\",\"status\":\"open\"}", &out);
	feed(env, "{\"type\":\"ask\",\"id\":\"b2\",\"kind\":\"question\",\"question\":\"?\",\"status\":\"open\"}", &out);
	feed(env, "{\"type\":\"result\",\"message\":\"done\"}", &out);
	TH_CHECK(out.terminal && proto_env_open_asks(env) == 2, "result keeps asks open");
	memset(&c, 0, sizeof(c));
	c.stop_at = 2;
	TH_CHECK(proto_env_close_asks(env, 11, "rejected", collect_emit, NULL, &c) == 1, "one closed");
	TH_CHECK_STR("close ask", c.lines[0],
	             "{\"type\":\"ask\",\"id\":\"b1\",\"kind\":\"question\",\"status\":\"rejected\",\"ts\":11}");
	memset(&c, 0, sizeof(c));
	TH_CHECK(proto_env_close_asks(env, 12, "rejected", collect_emit, NULL, &c) == 1 && proto_env_open_asks(env) == 0,
	         "retry closes b2");
	proto_env_free(env);

	/* Open asks are capped. */
	env = proto_env_new(0);
	proto_env_allow_asks(env, 1);
	for (int i = 0; i <= PROTO_ENV_ASKS_MAX; i++) {
		char l[160];
		snprintf(l, sizeof(l), "{\"type\":\"ask\",\"id\":\"k%d\",\"kind\":\"question\",\"question\":\"?\",\"status\":\"open\"}", i);
		feed(env, l, &out);
		if (i == PROTO_ENV_ASKS_MAX)
			TH_CHECK(!out.valid && strcmp(out.reason, "ask: too many open asks") == 0, "cap: %s", out.reason);
	}
	TH_CHECK(proto_env_open_asks(env) == PROTO_ENV_ASKS_MAX, "cap held");
	proto_env_free(env);
}

static void test_builders(void)
{
	size_t len = 0;
	char *p;

	p = proto_env_make_log("warn", "say \"hi\"\\ \n\ttab \x01 caf\xc3\xa9 \xff end", 42, &len);
	TH_CHECK_STR("make_log", p,
	             "{\"type\":\"log\",\"level\":\"warn\",\"message\":\"say \\\"hi\\\"\\\\ \\n\\ttab \\u0001 caf\xc3\xa9 \xef\xbf\xbd end\",\"ts\":42}");
	TH_CHECK(p && len == strlen(p), "make_log len");
	free(p);
	p = proto_env_make_error(PROTO_ERR_RUNTIME_CAP, "The run hit its 60 s limit / stopped", 7, NULL);
	TH_CHECK_STR("make_error", p,
	             "{\"type\":\"error\",\"code\":\"runtime_cap\",\"message\":\"The run hit its 60 s limit / stopped\",\"ts\":7}");
	free(p);
	p = proto_env_make_error(PROTO_ERR_INTERNAL, NULL, 0, &len);
	TH_CHECK_STR("make_error empty", p,
	             "{\"type\":\"error\",\"code\":\"internal\",\"message\":\"\",\"ts\":0}");
	free(p);

	/* What the builders write passes validation as a terminal line. */
	{
		proto_env_t *env = proto_env_new(0);
		proto_env_line_t out;

		p = proto_env_make_error(PROTO_ERR_CANCELLED, "Cancelled by the caller", 3, &len);
		proto_env_process(env, p, len, NOW, &out);
		TH_CHECK(out.valid && out.terminal && out.type == PROTO_ENV_ERROR, "builder output valid");
		TH_CHECK_MEM("builder output unchanged", out.text, out.len, p);
		TH_CHECK_STR("the error's code comes with the line", out.code, "cancelled");
		free(p);
		/* A code longer than the field is cut, never overrun. */
		char big[200], line[300];
		memset(big, 'c', sizeof(big) - 1);
		big[sizeof(big) - 1] = '\0';
		snprintf(line, sizeof(line), "{\"type\":\"error\",\"code\":\"%s\",\"message\":\"m\"}", big);
		static const char result[] = "{\"type\":\"result\",\"message\":\"m\"}";
		proto_env_t *env2 = proto_env_new(0);
		proto_env_process(env2, line, strlen(line), NOW, &out);
		TH_CHECK(out.terminal && strlen(out.code) == PROTO_ENV_CODE_MAX - 1 && out.code[0] == 'c',
		         "a long code is cut to the field");
		proto_env_process(env2, result, sizeof(result) - 1, NOW, &out);
		TH_CHECK(out.action == PROTO_ENV_DROP && !out.code[0], "no code on a dropped line");
		proto_env_free(env2);
		env2 = proto_env_new(0);
		proto_env_process(env2, result, sizeof(result) - 1, NOW, &out);
		TH_CHECK(out.terminal && !out.code[0], "a result has no code");
		proto_env_free(env2);
		proto_env_free(env);
	}
}

/* A long run reuses one env: buffers grow once and stay bounded. */
static void test_reuse(void)
{
	proto_env_t *env = proto_env_new(0);
	proto_env_line_t out;
	char line[160];
	int i;

	for (i = 0; i < 20000; i++) {
		int n = snprintf(line, sizeof(line),
		                 "{\"type\":\"step\",\"id\":\"s%d\",\"name\":\"n\",\"status\":\"%s\"}",
		                 i / 2, i % 2 ? "succeeded" : "running");
		proto_env_process(env, line, (size_t)n, i, &out);
		TH_CHECK(out.valid, "line %d: %s", i, out.reason);
	}
	TH_CHECK(proto_env_open_steps(env) == 0, "all closed");
	proto_env_free(env);
}

int main(void)
{
	run_table();
	test_size_cap();
	test_deep_nesting();
	test_steps();
	test_drop_after_terminal();
	test_asks();
	test_builders();
	test_reuse();
	return th_done();
}
