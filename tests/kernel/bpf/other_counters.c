/* SPDX-License-Identifier: GPL-2.0-only */
/* Test fixture: a program of someone else's whose map is named xdp_counters, as bpf/counter's is, but holds plain
 * __u64 values, not struct xdp_counter: the metrics exporter must not read it as a counter. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u64);
} xdp_counters SEC(".maps");

SEC("xdp")
int other_count(struct xdp_md *ctx)
{
	__u32 slot = 0;
	__u64 *n = bpf_map_lookup_elem(&xdp_counters, &slot);

	if (n)
		__sync_fetch_and_add(n, 1);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
