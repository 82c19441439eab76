// SPDX-License-Identifier: GPL-2.0-only
/*
 * filter: the packet filter of filter.h at two hooks, one object. filter_xdp runs at XDP (native or generic),
 * filter_tc at tc ingress (tcx). Both run filter_frame() over the same maps, so a deployment picks its hook and the
 * rules, counters and user-space code stay the same.
 *
 * Build: clang -O2 -g -target bpf -I/usr/include/x86_64-linux-gnu -Ibpf/include \
 *          -c bpf/filter/filter.c -o filter.o
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

#include "filter.h"

SEC("xdp")
int filter_xdp(struct xdp_md *ctx)
{
	void *data_end = (void *)(long)ctx->data_end;
	void *data = (void *)(long)ctx->data;

	return filter_frame(data, data_end, data_end - data) == FILTER_DROP ? XDP_DROP : XDP_PASS;
}

/*
 * Pass is TC_ACT_UNSPEC (tcx: next program), so a program attached after the filter on the same device (the VTEP's
 * tc backend, say) still sees what the filter passes.
 */
SEC("tc")
int filter_tc(struct __sk_buff *skb)
{
	void *data_end = (void *)(long)skb->data_end;
	void *data = (void *)(long)skb->data;
	__u32 reason = UNMATCHED_NO_RULE;
	struct filter_key key = {};
	int parsed;

	parsed = filter_parse(&key, data, data_end, &reason);
	/*
	 * The program reads only the skb's linear part. When the headers run past it, pull them in (only then: it may
	 * copy) up to FILTER_PULL_BYTES, and parse again; what is still out of reach stays unknown.
	 */
	if ((key.flags & KEY_SHORT) && skb->len > data_end - data && data_end - data < FILTER_PULL_BYTES) {
		bpf_skb_pull_data(skb, skb->len < FILTER_PULL_BYTES ? skb->len : FILTER_PULL_BYTES);
		data_end = (void *)(long)skb->data_end;
		data = (void *)(long)skb->data;
		__builtin_memset(&key, 0, sizeof(key));
		reason = UNMATCHED_NO_RULE;
		parsed = filter_parse(&key, data, data_end, &reason);
	}
	return filter_decide(&key, parsed, reason, skb->len) == FILTER_DROP ? TC_ACT_SHOT : TC_ACT_UNSPEC;
}

char _license[] SEC("license") = "GPL";
