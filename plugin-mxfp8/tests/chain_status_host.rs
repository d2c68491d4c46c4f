//! The chained GEMM's status merge (`cuda/include/mx_chain_status.cuh`, launched as
//! `mx_chain_status_merge` before every chained GEMM), compiled for the host through
//! `tests/host/simt.hpp`: the merged gate words are the operands' flags ORed and their
//! residual counts added, saturating at `i32::MAX` (a count read as unsigned, so that no sum
//! wraps to a small or negative count that would open the gate), and the gate memory's slot
//! gets the same two words. Checked against a plain Rust statement of the rule on edge cases
//! and fresh random words. Without a C++ compiler it prints a visible skip message, or fails
//! under `MXHOST_REQUIRE_CXX=1`.

use std::io::Write;
use std::process::{Command, Stdio};

mod host;

/// The rule, stated independently of the kernel.
fn merged(a: [i32; 2], b: [i32; 2]) -> [i32; 2] {
    let n = a[1] as u32 as u64 + b[1] as u32 as u64;
    [a[0] | b[0], n.min(i32::MAX as u64) as i32]
}

#[test]
fn merged_words_and_the_slot_follow_the_rule() {
    let Some((exe, mut rng, seed)) = host::setup("chain_status_host", "chain_status_driver.cpp")
    else {
        return;
    };
    let mut cases: Vec<([i32; 2], [i32; 2])> = vec![
        ([0, 0], [0, 0]),
        ([0, 7], [0, 5]),
        ([1, 3], [0, 0]),
        ([0, 0], [2, 0]),
        ([4, 0], [8, 1]),
        ([0, i32::MAX], [0, 1]),
        ([0, i32::MAX], [0, i32::MAX]),
        ([0, 2_000_000_000], [0, 2_000_000_000]),
        ([0, -1], [0, 0]), // a count past i32 (unsigned): still closes the gate
    ];
    for _ in 0..200 {
        let word = |rng: &mut host::Rng| [rng.below(16) as i32, rng.below(1 << 31) as i32];
        cases.push((word(&mut rng), word(&mut rng)));
    }
    let mut child = Command::new(&exe)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let input: String = cases
        .iter()
        .map(|(a, b)| format!("{} {} {} {}\n", a[0], a[1], b[0], b[1]))
        .collect();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "seed {seed}: the driver failed");
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), cases.len(), "seed {seed}: one line per case");
    for ((a, b), line) in cases.iter().zip(lines) {
        let got: Vec<i32> = line.split(' ').map(|v| v.parse().unwrap()).collect();
        let want = merged(*a, *b);
        assert_eq!(&got[..2], &want, "seed {seed}: merge of {a:?} and {b:?}");
        assert_eq!(&got[2..], &want, "seed {seed}: the slot of {a:?} and {b:?}");
    }
}
