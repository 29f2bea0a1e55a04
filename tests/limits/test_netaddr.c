/*
 * tests/limits/test_netaddr.c - common/netaddr.c alone: the class of every
 * kind of address a run might aim at (each spelling of loopback as the
 * resolver turns it into an address, private, CGNAT, ULA, link-local,
 * mapped and embedded IPv4 forms), the worker's own services as a set,
 * and the rule "a run-supplied host reaches public addresses only, unless
 * the operator named it".
 */
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "common/netaddr.h"
#include "tests/support/harness.h"

/* The first address getaddrinfo gives for host (the proxy's own lookup). */
static int resolve(const char *host, int port, struct sockaddr_storage *ss)
{
	struct addrinfo hints, *res = NULL;
	char ps[8];
	snprintf(ps, sizeof(ps), "%d", port);
	memset(&hints, 0, sizeof(hints));
	hints.ai_socktype = SOCK_STREAM;
	if (getaddrinfo(host, ps, &hints, &res) != 0 || !res)
		return -1;
	memset(ss, 0, sizeof(*ss));
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	freeaddrinfo(res);
	return 0;
}

static rn_addr_class_t class_of(const char *host)
{
	struct sockaddr_storage ss;
	if (resolve(host, 80, &ss) < 0) {
		TH_CHECK(0, "%s does not resolve", host);
		return RN_ADDR_CLASS_COUNT;
	}
	return rn_netaddr_classify((struct sockaddr *)&ss);
}

static void test_classes(void)
{
	static const struct {
		const char *host;
		rn_addr_class_t want;
	} cases[] = {
		/* Loopback, as a run may spell it. */
		{ "localhost", RN_ADDR_LOOPBACK },
		{ "127.0.0.1", RN_ADDR_LOOPBACK },
		{ "127.1", RN_ADDR_LOOPBACK },
		{ "127.0.1", RN_ADDR_LOOPBACK },
		{ "2130706433", RN_ADDR_LOOPBACK },
		{ "0x7f000001", RN_ADDR_LOOPBACK },
		{ "0x7f.1", RN_ADDR_LOOPBACK },
		{ "0177.0.0.1", RN_ADDR_LOOPBACK },
		{ "017700000001", RN_ADDR_LOOPBACK },
		{ "127.255.255.254", RN_ADDR_LOOPBACK },
		{ "::1", RN_ADDR_LOOPBACK },
		{ "::ffff:127.0.0.1", RN_ADDR_LOOPBACK },
		{ "::ffff:7f00:1", RN_ADDR_LOOPBACK },
		{ "64:ff9b::127.0.0.1", RN_ADDR_LOOPBACK },
		{ "2002:7f00:1::", RN_ADDR_LOOPBACK },
		/* 0.0.0.0 connects to the host itself on Linux. */
		{ "0", RN_ADDR_UNSPECIFIED },
		{ "0.0.0.0", RN_ADDR_UNSPECIFIED },
		{ "::", RN_ADDR_UNSPECIFIED },
		{ "::ffff:0.0.0.0", RN_ADDR_UNSPECIFIED },
		/* RFC 1918, CGNAT, ULA, link-local. */
		{ "10.0.0.1", RN_ADDR_PRIVATE },
		{ "167772161", RN_ADDR_PRIVATE },
		{ "172.16.0.1", RN_ADDR_PRIVATE },
		{ "172.31.255.255", RN_ADDR_PRIVATE },
		{ "192.168.1.1", RN_ADDR_PRIVATE },
		{ "::ffff:10.1.2.3", RN_ADDR_PRIVATE },
		{ "fec0::1", RN_ADDR_PRIVATE },
		{ "100.64.0.1", RN_ADDR_CGNAT },
		{ "100.127.255.255", RN_ADDR_CGNAT },
		{ "fc00::1", RN_ADDR_ULA },
		{ "fd12:3456::1", RN_ADDR_ULA },
		{ "169.254.169.254", RN_ADDR_LINK_LOCAL },
		{ "fe80::1", RN_ADDR_LINK_LOCAL },
		{ "::ffff:169.254.169.254", RN_ADDR_LINK_LOCAL },
		/* Multicast and reserved. */
		{ "224.0.0.1", RN_ADDR_MULTICAST },
		{ "ff02::1", RN_ADDR_MULTICAST },
		{ "240.0.0.1", RN_ADDR_RESERVED },
		{ "255.255.255.255", RN_ADDR_RESERVED },
		{ "192.0.2.1", RN_ADDR_RESERVED },
		{ "198.18.0.1", RN_ADDR_RESERVED },
		{ "2001:db8::1", RN_ADDR_RESERVED },
		{ "::127.0.0.1", RN_ADDR_RESERVED },
		{ "100::1", RN_ADDR_RESERVED },
		/* Public, right next to the private ranges. */
		{ "8.8.8.8", RN_ADDR_PUBLIC },
		{ "172.32.0.1", RN_ADDR_PUBLIC },
		{ "172.15.255.255", RN_ADDR_PUBLIC },
		{ "100.128.0.1", RN_ADDR_PUBLIC },
		{ "100.63.255.255", RN_ADDR_PUBLIC },
		{ "169.253.1.1", RN_ADDR_PUBLIC },
		{ "11.0.0.1", RN_ADDR_PUBLIC },
		{ "2606:4700::1111", RN_ADDR_PUBLIC },
		{ "::ffff:1.1.1.1", RN_ADDR_PUBLIC },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		rn_addr_class_t c = class_of(cases[i].host);
		TH_CHECK(c == cases[i].want, "%s: %s, want %s", cases[i].host, rn_netaddr_class_text(c),
		         rn_netaddr_class_text(cases[i].want));
	}
	struct sockaddr_un_like {
		sa_family_t f;
	} other = { AF_UNIX };
	TH_CHECK(rn_netaddr_classify((struct sockaddr *)&other) == RN_ADDR_RESERVED, "not IP: reserved");
	TH_CHECK(th_streq(rn_netaddr_class_text(RN_ADDR_LOOPBACK), "a loopback address"));
}

static void test_format(void)
{
	struct sockaddr_storage ss;
	char buf[80];
	TH_REQUIRE(resolve("127.1", 6379, &ss) == 0, "127.1");
	rn_netaddr_format((struct sockaddr *)&ss, buf, sizeof(buf));
	TH_CHECK(th_streq(buf, "127.0.0.1:6379"), "%s", buf);
	TH_REQUIRE(resolve("::ffff:127.0.0.1", 80, &ss) == 0, "mapped");
	rn_netaddr_format((struct sockaddr *)&ss, buf, sizeof(buf));
	TH_CHECK(th_streq(buf, "[::ffff:127.0.0.1]:80"), "%s", buf);
}

/* Literals only: a name, a bracketed or shortened form is not one. */
static void test_literal(void)
{
	struct sockaddr_storage ss;
	TH_CHECK(rn_netaddr_literal("10.1.2.3", &ss) == 0 && ss.ss_family == AF_INET &&
	                 rn_netaddr_classify((struct sockaddr *)&ss) == RN_ADDR_PRIVATE,
	         "IPv4 literal");
	TH_CHECK(rn_netaddr_literal("::1", &ss) == 0 && ss.ss_family == AF_INET6 &&
	                 rn_netaddr_classify((struct sockaddr *)&ss) == RN_ADDR_LOOPBACK,
	         "IPv6 literal");
	TH_CHECK(rn_netaddr_literal("localhost", &ss) < 0, "a name");
	TH_CHECK(rn_netaddr_literal("[::1]", &ss) < 0, "brackets");
	TH_CHECK(rn_netaddr_literal("127.1", &ss) < 0, "inet_aton's short form is for the resolver");
	TH_CHECK(rn_netaddr_literal("", &ss) < 0, "empty");
}

/* The worker's own services: address and port; a mapped address is itself;
 * a listener on every interface covers each local address. */
static void test_own_set(void)
{
	rn_netaddr_set_t own = { 0 };
	char err[256];
	TH_CHECK(rn_netaddr_set_add(&own, "127.0.0.1", 6390, err, sizeof(err)) == 0, "%s", err);
	TH_CHECK(rn_netaddr_set_add_list(&own, "PLAINTEXT://8.8.4.4:9092, [2606:4700::1111]:9093,1.1.1.1",
	                                 9092, err, sizeof(err)) == 0,
	         "%s", err);
	struct sockaddr_storage ss;
	resolve("127.1", 6390, &ss);
	TH_CHECK(rn_netaddr_set_has(&own, (struct sockaddr *)&ss), "127.1:6390 is the worker's Redis");
	resolve("::ffff:127.0.0.1", 6390, &ss);
	TH_CHECK(rn_netaddr_set_has(&own, (struct sockaddr *)&ss), "mapped too");
	resolve("127.0.0.1", 6391, &ss);
	TH_CHECK(!rn_netaddr_set_has(&own, (struct sockaddr *)&ss), "another port is not");
	resolve("8.8.4.4", 9092, &ss);
	TH_CHECK(rn_netaddr_set_has(&own, (struct sockaddr *)&ss), "a broker");
	resolve("1.1.1.1", 9092, &ss);
	TH_CHECK(rn_netaddr_set_has(&own, (struct sockaddr *)&ss), "a broker on the default port");
	resolve("2606:4700::1111", 9093, &ss);
	TH_CHECK(rn_netaddr_set_has(&own, (struct sockaddr *)&ss), "an IPv6 broker");

	/* The rule: public and not the worker's own, unless named. */
	char why[80] = "";
	resolve("8.8.4.4", 9092, &ss);
	TH_CHECK(!rn_netaddr_run_may_reach((struct sockaddr *)&ss, 0, &own, why, sizeof(why)),
	         "a public broker of the worker's");
	TH_CHECK(th_streq(why, "one of the worker's own services"), "%s", why);
	TH_CHECK(rn_netaddr_run_may_reach((struct sockaddr *)&ss, 1, &own, why, sizeof(why)), "named");
	resolve("8.8.4.4", 443, &ss);
	TH_CHECK(rn_netaddr_run_may_reach((struct sockaddr *)&ss, 0, &own, why, sizeof(why)), "public");
	resolve("2130706433", 80, &ss);
	TH_CHECK(!rn_netaddr_run_may_reach((struct sockaddr *)&ss, 0, NULL, why, sizeof(why)), "loopback");
	TH_CHECK(th_streq(why, "a loopback address"), "%s", why);
	TH_CHECK(rn_netaddr_run_may_reach((struct sockaddr *)&ss, 1, NULL, why, sizeof(why)),
	         "loopback the operator named");
	rn_netaddr_set_free(&own);

	/* 0.0.0.0: every local address. */
	TH_CHECK(rn_netaddr_set_add(&own, "0.0.0.0", 9464, err, sizeof(err)) == 0, "%s", err);
	resolve("127.0.0.1", 9464, &ss);
	TH_CHECK(rn_netaddr_set_has(&own, (struct sockaddr *)&ss), "a wildcard listener covers loopback");
	TH_CHECK(rn_netaddr_set_add(&own, "no-such-host.invalid", 1, err, sizeof(err)) < 0,
	         "a name that does not resolve");
	TH_CHECK(strstr(err, "no-such-host.invalid"), "%s", err);
	rn_netaddr_set_free(&own);
}

int main(void)
{
	th_init("netaddr");
	test_classes();
	test_format();
	test_literal();
	test_own_set();
	return th_done();
}
