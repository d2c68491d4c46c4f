// chain_status_driver.cpp — mx_chain_status_words (cuda/include/mx_chain_status.cuh) on the host,
// for tests/chain_status_host.rs. Reads lines "a0 a1 b0 b1" (the operands' status words: flags,
// residual count) from stdin and prints, per line, "out0 out1 slot0 slot1": the merged words and
// the gate-memory slot (set to the sentinel -1 first) they were copied into; the same call with
// no slot must leave the same merged words, else the driver fails.
#include "simt.hpp"
#include <cstdio>
#include "mx_chain_status.cuh"

int main() {
  long long a0, a1, b0, b1;
  while (scanf("%lld %lld %lld %lld", &a0, &a1, &b0, &b1) == 4) {
    const int a[2] = {(int)a0, (int)a1}, b[2] = {(int)b0, (int)b1};
    int out[2] = {-7, -7}, slot[2] = {-1, -1}, plain[2] = {-7, -7};
    mx_chain_status_words(a, b, out, slot);
    mx_chain_status_words(a, b, plain, nullptr);
    if (plain[0] != out[0] || plain[1] != out[1]) {
      fprintf(stderr, "merge differs without the slot\n");
      return 1;
    }
    printf("%d %d %d %d\n", out[0], out[1], slot[0], slot[1]);
  }
  return 0;
}
