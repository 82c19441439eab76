// A fixture object for the binding's unit tests: maps of several kinds and layouts, and .rodata knobs.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct flow_key {
	__u32 ifindex;
	__u16 vid;
	__u8 pad[2];
};

struct flow_stats {
#ifdef FLOW_STATS_REORDERED /* the same size, the fields in another order: another layout */
	__u64 bytes;
	__u64 packets;
#else
	__u64 packets;
	__u64 bytes;
#endif
	__u8 mac[6];
	__s16 delta;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct flow_key);
	__type(value, struct flow_stats);
} flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u64);
} hits SEC(".maps");

const volatile __u32 verdict = XDP_PASS;
const volatile __s8 bias = 0;
const volatile __u64 cookie = 0;

SEC("xdp")
int xdp_fixture(struct xdp_md *ctx)
{
	__u32 slot = 0;
	__u64 *hit = bpf_map_lookup_elem(&hits, &slot);

	if (hit)
		*hit += 1 + bias + (cookie & 1);
	return verdict;
}

char LICENSE[] SEC("license") = "GPL";
