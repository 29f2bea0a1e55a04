/*
 * agent/http.c - one transfer at a time on a private multi handle (see
 * http.h).
 */
#include "agent/http.h"

#include <stdio.h>

#include "agent/ctl.h"
#include "common/util.h"

static int64_t last_activity;
static int aborted;

void agent_http_touch(void)
{
	last_activity = rn_mono_ms();
}

void agent_http_abort(void)
{
	aborted = 1;
}

agent_http_rc_t agent_http_perform(CURL *easy, int64_t idle_ms, char *errstr, size_t errstr_size)
{
	CURLM *m = curl_multi_init();
	if (!m) {
		snprintf(errstr, errstr_size, "out of memory");
		return AGENT_HTTP_FAILED;
	}
	aborted = 0;
	agent_http_touch();
	curl_multi_add_handle(m, easy);
	agent_http_rc_t rc = AGENT_HTTP_FAILED;
	int running = 1;
	while (running) {
		if (agent_ctl_stopped()) {
			rc = AGENT_HTTP_STOPPED;
			goto out;
		}
		CURLMcode mc = curl_multi_perform(m, &running);
		if (mc != CURLM_OK) {
			snprintf(errstr, errstr_size, "%s", curl_multi_strerror(mc));
			goto out;
		}
		if (!running)
			break;
		int64_t left = last_activity + idle_ms - rn_mono_ms();
		if (left <= 0) {
			rc = AGENT_HTTP_IDLE;
			goto out;
		}
		struct curl_waitfd extra = { agent_ctl_stop_fd(), CURL_WAIT_POLLIN, 0 };
		int wait = left < 1000 ? (int)left : 1000;
		mc = curl_multi_poll(m, &extra, 1, wait, NULL);
		if (mc != CURLM_OK) {
			snprintf(errstr, errstr_size, "%s", curl_multi_strerror(mc));
			goto out;
		}
	}
	CURLMsg *msg;
	int left_msgs;
	rc = AGENT_HTTP_FAILED;
	snprintf(errstr, errstr_size, "the transfer did not finish");
	while ((msg = curl_multi_info_read(m, &left_msgs))) {
		if (msg->msg != CURLMSG_DONE)
			continue;
		if (msg->data.result == CURLE_OK || (aborted && msg->data.result == CURLE_WRITE_ERROR)) {
			rc = AGENT_HTTP_OK;
		} else {
			snprintf(errstr, errstr_size, "%s", curl_easy_strerror(msg->data.result));
			rc = AGENT_HTTP_FAILED;
		}
	}
out:
	curl_multi_remove_handle(m, easy);
	curl_multi_cleanup(m);
	return rc;
}
