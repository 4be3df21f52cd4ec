//! GPU code checked by structure: PTX text depends on LLVM's NVPTX back end, so these tests
//! look for what must be there (`.entry`, `ld.shared`, `bar.sync`) rather than exact text.
//! Launches need a CUDA device: without one (`quasi_lang::tools::gpu_probe`) those tests say so and
//! pass, having checked the no-device error instead.

use quasi_lang::{Item, Kind, Language, Session, SessionConfig};

fn session() -> Session {
    Session::new(SessionConfig { capture_output: true, ..SessionConfig::default() }).expect("session")
}

fn eval_ok(session: &mut Session, cell: &str) -> Vec<Item> {
    let outcome = session.eval(cell);
    assert!(!outcome.failed(), "{cell} failed: {:?}", outcome.diagnostics);
    outcome.items
}

fn ptx(session: &mut Session, name: &str) -> String {
    let items = eval_ok(session, &format!(":ptx {name}"));
    match items.as_slice() {
        // The listing, then ptxas's line (tests/ptxas.rs checks it).
        [Item::Listing { title, language: Language::Ptx, text }, Item::Message(line)] if line.starts_with("ptxas") => {
            assert_eq!(title, &format!("{name}: PTX (sm_90)"));
            text.clone()
        }
        other => panic!("`:ptx {name}` listed {other:?}"),
    }
}

const VADD: &str =
    "(define-kernel ((vadd void) (a (ptr float) in n) (b (ptr float) in n) (c (ptr float) out n) (n int))
  (declare i int)
  (set i (add (tid.x) (mul (bdim.x) (bid.x))))
  (if (lt i n) (store (ptradd c i) (fadd (load (ptradd a i)) (load (ptradd b i))))))";

#[test]
fn a_kernel_is_a_ptx_entry_for_sm_90() {
    let mut session = session();
    eval_ok(&mut session, VADD);
    let text = ptx(&mut session, "vadd");
    for needle in [
        ".version 7.8",
        ".target sm_90",
        ".address_size 64",
        ".visible .entry vadd(",
        "%tid.x",
        "%ntid.x",
        "%ctaid.x",
        "ld.global.f32",
        "add.rn.f32",
        "st.global.f32",
    ] {
        assert!(text.contains(needle), "PTX lacks `{needle}`:\n{text}");
    }
}

#[test]
fn shared_memory_and_barriers_reach_ptx() {
    let mut session = session();
    eval_ok(&mut session, "(define-shared tile (256 float))");
    eval_ok(
        &mut session,
        "(define-kernel ((reverse void) (data (ptr float)))
      (declare t int) (set t [tid.x])
      (store (aptradd tile t) (load (ptradd data t)))
      (__syncthreads)
      (store (ptradd data t) (load (aptradd tile (sub 255 t)))))",
    );
    let text = ptx(&mut session, "reverse");
    for needle in [".shared .align 16 .b8", "st.shared.f32", "ld.shared.f32", "bar.sync"] {
        assert!(text.contains(needle), "PTX lacks `{needle}`:\n{text}");
    }
}

#[test]
fn device_functions_fold_into_their_kernel_and_names_become_ptx_identifiers() {
    let mut session = session();
    eval_ok(&mut session, "(define ((global-id int)) (ret (add (tid.x) (mul (bdim.x) (bid.x)))))");
    eval_ok(&mut session, "(define-kernel ((fill-ones void) (p (ptr int))) (store (ptradd p (call global-id)) 1))");
    let text = ptx(&mut session, "fill-ones");
    assert!(text.contains(".entry fill$2dones("), "{text}");
    assert!(!text.contains("call.uni"), "the device function is inlined at O3:\n{text}");
}

#[test]
fn gpu_arch_changes_the_target_and_stages_show_ptx() {
    let mut session = session();
    eval_ok(&mut session, VADD);
    eval_ok(&mut session, ":gpu-arch sm_80");
    let items = eval_ok(&mut session, ":stages vadd");
    let titles: Vec<String> = items
        .iter()
        .filter_map(|item| match item {
            Item::Listing { title, .. } => Some(title.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(titles.last().map(String::as_str), Some("vadd: PTX (sm_80)"), "{titles:?}");
    let Some(Item::Listing { text, language: Language::Ptx, .. }) = items.last() else { panic!("no PTX stage") };
    assert!(text.contains(".target sm_80"), "{text}");
    let outcome = session.eval(":gpu-arch sm_13");
    assert!(outcome.failed());
}

#[test]
fn a_plain_void_function_compiles_as_a_kernel_for_a_launch() {
    let mut session = session();
    eval_ok(
        &mut session,
        "(define ((kernel void) (p (ptr int)) (n int)) (if (lt (tid.x) n) (store (ptradd p (tid.x)) (tid.x))))",
    );
    let text = ptx(&mut session, "kernel");
    assert!(text.contains(".entry kernel("), "{text}");
}

/// The staged SGEMM of `prelude/gpu.rhai`: tiles in shared memory, a barrier per tile,
/// unrolled inner loops of fused multiply-adds.
#[test]
fn the_staged_sgemm_uses_shared_tiles() {
    let mut session = session();
    eval_ok(&mut session, ",@(sgemm sgemm 64 64 8 4 4)");
    let text = ptx(&mut session, "sgemm");
    for needle in [".entry sgemm(", ".shared", "ld.shared", "st.shared", "bar.sync", "fma.rn.f32"] {
        assert!(text.contains(needle), "PTX lacks `{needle}`:\n{text}");
    }
    eval_ok(&mut session, ",@(reduce sum 256)");
    let text = ptx(&mut session, "sum");
    for needle in [".entry sum(", "bar.sync", "atom.global.add.f32"] {
        assert!(text.contains(needle), "PTX lacks `{needle}`:\n{text}");
    }
}

/// The fast configuration of the staged SGEMM: 128-bit loads from global and shared memory
/// and 128-bit stores to C (LLVM's load/store vectorizer, from alignment the generated code
/// makes visible), one barrier in the double-buffered k loop besides the prologue's; the
/// scalar variant has no 128-bit global accesses.
#[test]
fn the_staged_sgemm_moves_quads() {
    let mut session = session();
    eval_ok(&mut session, ",@(sgemm sg 128 128 8 8 8)");
    let text = ptx(&mut session, "sg");
    for needle in ["ld.global.v4.f32", "ld.shared.v4.f32", "st.global.v4.f32", "st.shared.v4.f32"] {
        assert!(text.contains(needle), "PTX lacks `{needle}`:\n{text}");
    }
    assert_eq!(text.matches("bar.sync").count(), 2, "{text}");
    eval_ok(&mut session, ",@(sgemm plain 64 64 8 4 4 (#:vector #f))");
    let text = ptx(&mut session, "plain");
    for needle in ["ld.global.v4", "st.global.v4"] {
        assert!(!text.contains(needle), "PTX has `{needle}`:\n{text}");
    }
}

#[test]
fn launches_run_on_a_device_or_say_there_is_none() {
    let mut session = session();
    eval_ok(&mut session, VADD);
    eval_ok(&mut session, "(declare h (ptr float))");
    eval_ok(&mut session, "(set h (alloc float 1024))");
    eval_ok(&mut session, "(declare i int)");
    eval_ok(&mut session, "(for ((set i 0) (lt i 1024) (set i (add i 1))) (store (ptradd h i) (sitofp i float)))");
    let outcome = session.eval("(launch vadd (grid 4) (block 256) (in h 1024) (in h 1024) (out h 1024) 1024)");
    match quasi_lang::tools::gpu_probe() {
        Err(reason) => {
            eprintln!("skipping the launch on a GPU: {reason}");
            let errors: Vec<_> = outcome.diagnostics.iter().filter(|diagnostic| diagnostic.is_error()).collect();
            assert_eq!(errors.len(), 1, "{:?}", outcome.diagnostics);
            assert_eq!(errors[0].kind, Kind::Gpu);
            assert!(errors[0].message.starts_with("no CUDA device"), "{}", errors[0].message);
        }
        Ok(device) => {
            eprintln!("launching on {device}");
            assert!(!outcome.failed(), "{:?}", outcome.diagnostics);
            assert!(outcome.timing.device.iter().any(|row| row.label == "kernel vadd"), "{:?}", outcome.timing.device);
            let items = eval_ok(&mut session, "(load (ptradd h 1023))");
            assert_eq!(items, vec![Item::Value { text: "2046.0".into(), ty: "float".into() }]);
            let items = eval_ok(&mut session, "(declare buf (gpu-buf float)) (set buf (gpu-alloc float 4))");
            assert!(
                matches!(items.last(), Some(Item::Value { text, .. }) if text == "<gpu 4 × float> [0.0, 0.0, 0.0, 0.0]"),
                "{items:?}"
            );
        }
    }
}
