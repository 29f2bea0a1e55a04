/*
 * proto/jsonerr.c - JSON failure wording (see jsonerr.h).
 */
#include "proto/jsonerr.h"

const char *proto_json_error_words(const json_error_t *jerr, const char *other_words)
{
	switch (json_error_code(jerr)) {
	case json_error_invalid_utf8: return "invalid UTF-8";
	case json_error_null_character: return "contains a NUL byte";
	case json_error_duplicate_key: return "duplicate key";
	case json_error_numeric_overflow: return "number out of range";
	case json_error_wrong_type: return "not a JSON object";
	default: return other_words;
	}
}
