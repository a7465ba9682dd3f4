// The softverbs controls as no-ops, for the contract suite built against
// the real libibverbs (tensorhub_verbs_contract_hw): the cases that need
// fault injection see softverbs_active() == 0 and skip.
#include "softverbs.h"

extern "C" {

int softverbs_active(void) { return 0; }
void softverbs_configure(int) {}
struct softverbs_stats softverbs_get_stats(void) { return softverbs_stats{}; }
void softverbs_reset_stats(void) {}
void softverbs_set_read_delay_us(uint32_t) {}
void softverbs_fail_next_reads(uint32_t, int) {}
void softverbs_post_async_event(int, int) {}

}  // extern "C"
