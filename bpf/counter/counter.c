// SPDX-License-Identifier: GPL-2.0-only
/*
 * counter: count every frame (or only one IP protocol) and pass it on.
 *
 * Map xdp_counters: per-CPU array, key __u32 slot, value struct xdp_counter.
 * Each build counts into one slot, COUNTER_SLOT (default 0). Building a second
 * version with -DCOUNTER_SLOT=1 and swapping it in with bpf_link_update lets a
 * test check that old slot + new slot == frames sent (no frame uncounted).
 *
 * .rodata knob (set before load, e.g. via bpf_map__set_initial_value):
 *   count_only_proto  0 = count every frame; otherwise count only IPv4/IPv6
 *                     frames whose IP protocol / next header equals it (17 = UDP).
 *
 * Build: clang -O2 -g -target bpf -I/usr/include/x86_64-linux-gnu -Ibpf/include \
 *          -c bpf/counter/counter.c -o counter.o
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "xdpfleet_parse.h"

#ifndef COUNTER_SLOT
#define COUNTER_SLOT 0
#endif

#define XDP_COUNTER_SLOTS 8

_Static_assert(COUNTER_SLOT >= 0 && COUNTER_SLOT < XDP_COUNTER_SLOTS, "COUNTER_SLOT out of range");

struct xdp_counter {
	__u64 packets;
	__u64 bytes;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, XDP_COUNTER_SLOTS);
	__type(key, __u32);
	__type(value, struct xdp_counter);
} xdp_counters SEC(".maps");

const volatile __u32 count_only_proto = 0;

SEC("xdp")
int xdp_count(struct xdp_md *ctx)
{
	void *data_end = (void *)(long)ctx->data_end;
	void *data = (void *)(long)ctx->data;
	struct xdp_counter *cnt;
	__u32 slot = COUNTER_SLOT;

	if (count_only_proto) {
		struct xf_cursor cur;
		__u16 l3_proto;
		int l4;

		xf_cursor_init(&cur, ctx);
		l4 = xf_parse_to_l4(&cur, data_end, NULL, &l3_proto);
		if (l4 < 0 || (__u32)l4 != count_only_proto)
			return XDP_PASS;
	}

	cnt = bpf_map_lookup_elem(&xdp_counters, &slot);
	if (!cnt)
		return XDP_PASS;

	/* Per-CPU value: no other CPU writes it, plain adds are enough. */
	cnt->packets++;
	cnt->bytes += data_end - data;
	return XDP_PASS;
}

char _license[] SEC("license") = "GPL";
