//! `gemm`: the prelude's staged host GEMM (prelude/blas.rhai), autotuned here over
//! `gemm_configs`, against OpenBLAS (Debian's single-threaded build, at the fastest
//! `OPENBLAS_CORETYPE` this CPU runs), BLIS, clang -O3 -march=native of the same structure in C
//! (kernels/gemm.c at the autotune's configuration) and llama.lisp's MMult kernels (double, in
//! C-Lisp: kernels/matmul*.cl) — SGEMM and DGEMM, C = A·B row-major at n = 256, 512, 1000, 1024,
//! 2048, the sizes interleaved within each repetition, every result checked against a reference
//! product computed in double precision.

use std::ffi::c_void;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use quasi_lang::{Item, Session, SessionConfig};

use crate::kernels::{CLibrary, COMMON_CLISP};
use crate::{eval, new_table, value_of, Options};

/// Debian's single-threaded OpenBLAS, and BLIS (its OpenMP build, held to one thread).
const OPENBLAS: &str = "/usr/lib/x86_64-linux-gnu/openblas-serial/libopenblas.so.0";
const BLIS: &str = "/usr/lib/x86_64-linux-gnu/libblis.so.4";
const SIZES: [i32; 5] = [256, 512, 1000, 1024, 2048];
const QUICK_SIZES: [i32; 3] = [256, 512, 1000];
/// The size the autotune times its variants at.
const TUNE_SIZE: i32 = 1024;
/// llama.lisp's MMult kernels (no packing, no cache blocking) run up to this size: at 2048 each
/// run takes seconds.
const MMULT_MAX: i32 = 1024;

const ROW_MAJOR: i32 = 101;
const NO_TRANS: i32 = 111;
/// CBLAS's `cblas_sgemm` (T = f32) and `cblas_dgemm` (T = f64).
type Cblas<T> = extern "C" fn(i32, i32, i32, i32, i32, i32, T, *const T, i32, *const T, i32, T, *mut T, i32);
type Sgemm = Cblas<f32>;
type Dgemm = Cblas<f64>;
type Generated<T> = extern "C" fn(i32, i32, i32, *const T, *const T, *mut T);

/// `quasi-bench gemm-probe LIBRARY`: one process per OpenBLAS core type (it is read when the
/// library loads, and one the CPU lacks ends the process with SIGILL): prints the best SGEMM
/// GFLOP/s of three runs at n = 1024.
pub fn probe(library: &str) -> Result<()> {
    let library = CLibrary::open(Path::new(library))?;
    // SAFETY: cblas_sgemm has this C signature in every CBLAS.
    let sgemm: Sgemm = unsafe { std::mem::transmute::<*mut c_void, Sgemm>(library.symbol("cblas_sgemm")?) };
    let n = 1024;
    let (a, b, mut c) = (random(n * n, 1), random(n * n, 2), vec![0f32; n * n]);
    let best = (0..3)
        .map(|_| {
            let start = Instant::now();
            let size = n as i32;
            sgemm(
                ROW_MAJOR,
                NO_TRANS,
                NO_TRANS,
                size,
                size,
                size,
                1.0,
                a.as_ptr(),
                size,
                b.as_ptr(),
                size,
                0.0,
                c.as_mut_ptr(),
                size,
            );
            start.elapsed()
        })
        .min()
        .unwrap_or_default();
    println!("{:.3}", gflops(n as i32, best));
    Ok(())
}

/// The OpenBLAS core types whose instructions this CPU has (fastest kernels first), and ""
/// for the library's own choice.
fn core_types() -> Vec<&'static str> {
    let mut types = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        let avx512 = is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vl")
            && is_x86_feature_detected!("avx512dq")
            && is_x86_feature_detected!("avx512cd");
        if avx512 {
            types.push("SkylakeX");
            if is_x86_feature_detected!("avx512bf16") {
                types.push("Cooperlake");
            }
        }
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            types.extend(["Haswell", "Zen"]);
        }
        if is_x86_feature_detected!("avx") {
            types.push("Sandybridge");
        }
    }
    types.push("");
    types
}

/// Times each core type in its own process; the fastest, with every type's rate.
fn fastest_core_type() -> Result<(String, Vec<(String, String)>)> {
    let bench = std::env::current_exe().context("the quasi-bench binary")?;
    let mut rates = Vec::new();
    let mut best: Option<(f64, String)> = None;
    for core in core_types() {
        let mut command = Command::new(&bench);
        command.args(["gemm-probe", OPENBLAS]).env("OPENBLAS_NUM_THREADS", "1");
        if core.is_empty() {
            command.env_remove("OPENBLAS_CORETYPE");
        } else {
            command.env("OPENBLAS_CORETYPE", core);
        }
        let output = command.output().with_context(|| format!("running {}", bench.display()))?;
        let label = if core.is_empty() { "(its own choice)".to_string() } else { core.to_string() };
        let text = String::from_utf8_lossy(&output.stdout).trim().to_string();
        match text.parse::<f64>() {
            Ok(rate) if output.status.success() => {
                rates.push((label, format!("{rate:.1}")));
                if best.as_ref().is_none_or(|(fastest, _)| rate > *fastest) {
                    best = Some((rate, core.to_string()));
                }
            }
            _ => rates.push((label, format!("failed ({})", output.status))),
        }
    }
    let (_, core) = best.context("no OpenBLAS core type ran")?;
    Ok((core, rates))
}

/// Uniform numbers in [-1, 1) from a 64-bit LCG, the same for every implementation.
fn random<T: From<f32>>(count: usize, seed: u64) -> Vec<T> {
    let mut state = seed;
    (0..count)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            T::from(((state >> 40) as f32) / (1u64 << 23) as f32 - 1.0)
        })
        .collect()
}

fn gflops(n: i32, time: Duration) -> f64 {
    2.0 * f64::from(n).powi(3) / time.as_secs_f64() / 1e9
}

/// C = A·B in double precision, i-k-j: the reference every result is checked against.
fn reference(n: usize, a: &[f64], b: &[f64]) -> Vec<f64> {
    let mut c = vec![0f64; n * n];
    for i in 0..n {
        for p in 0..n {
            let aip = a[i * n + p];
            let (row, b_row) = (&mut c[i * n..(i + 1) * n], &b[p * n..(p + 1) * n]);
            for (c_ij, b_pj) in row.iter_mut().zip(b_row) {
                *c_ij += aip * b_pj;
            }
        }
    }
    c
}

/// The largest difference from the reference, relative to n (|a|, |b| < 1, so n bounds |C|).
fn error<T: Copy + Into<f64>>(c: &[T], reference: &[f64]) -> f64 {
    let n = (reference.len() as f64).sqrt();
    c.iter().zip(reference).map(|(&x, &r)| (x.into() - r).abs()).fold(0.0, f64::max) / n
}

/// One element type's data and implementations.
struct Precision<T> {
    a: Vec<T>,
    b: Vec<T>,
    c: Vec<T>,
    reference: Vec<f64>,
}

/// The same matrices in both precisions (the floats rounded from the doubles), C zeroed.
fn precisions(a: Vec<f64>, b: Vec<f64>) -> (Precision<f32>, Precision<f64>) {
    let single = Precision {
        a: a.iter().map(|&x| x as f32).collect(),
        b: b.iter().map(|&x| x as f32).collect(),
        c: vec![0f32; a.len()],
        reference: Vec::new(),
    };
    let count = a.len();
    (single, Precision { a, b, c: vec![0f64; count], reference: Vec::new() })
}

/// One implementation's best time per size, and whether each result passed its check.
#[derive(Default)]
struct Row {
    best: std::collections::HashMap<i32, Duration>,
    failed: Vec<String>,
}

impl Row {
    fn record(&mut self, n: i32, time: Duration) {
        let best = self.best.entry(n).or_insert(time);
        *best = (*best).min(time);
    }
}

/// The session side: autotuned SGEMM and DGEMM, llama.lisp's MMult kernels, and a timing
/// wrapper per function, each reading the clock inside compiled code around one call.
struct Quasi {
    session: Session,
}

impl Quasi {
    fn new() -> Result<Quasi> {
        let mut session = Session::new(SessionConfig { capture_output: true, ..SessionConfig::default() })?;
        eval(&mut session, COMMON_CLISP).context("kernels/common.cl")?;
        for (file, text) in [
            ("matmul.cl", include_str!("../kernels/matmul.cl")),
            ("matmul_1x4.cl", include_str!("../kernels/matmul_1x4.cl")),
            ("matmul_4x4.cl", include_str!("../kernels/matmul_4x4.cl")),
        ] {
            eval(&mut session, text).with_context(|| format!("kernels/{file}"))?;
        }
        Ok(Quasi { session })
    }

    /// Autotunes `name` over `gemm_configs` at size n on `data` (small integers:
    /// every partial sum is exact, so every variant must give the first one's C bit for bit);
    /// the winner's configuration `(mr nr mc kc nc)` and the autotune's table.
    fn tune<T>(&mut self, name: &str, ty: &str, data: &mut Precision<T>, n: i32) -> Result<(String, String)> {
        let cell = format!(
            "(autotune {name} (gen gemm_config {name} {ty} config) (params (config ,@(gemm_configs {ty})))
               (run (call {name} {n} {n} {n} (inttoptr {a} (ptr {ty})) (inttoptr {b} (ptr {ty})) (inttoptr {c} (ptr {ty}))))
               (check-buffer (inttoptr {c} (ptr {ty})) {count}) (tolerance 0) (fresh))",
            a = data.a.as_ptr() as usize,
            b = data.b.as_ptr() as usize,
            c = data.c.as_mut_ptr() as usize,
            count = n * n
        );
        let outcome = eval(&mut self.session, &cell)?;
        let report = outcome
            .items
            .iter()
            .find_map(|item| match item {
                Item::Autotune(report) => Some(report),
                _ => None,
            })
            .context("the autotune printed no table")?;
        let winner = report
            .variants
            .iter()
            .find(|variant| variant.result.is_ok())
            .and_then(|variant| variant.values.first().cloned())
            .context("no variant of the autotune passed")?;
        Ok((winner, quasi_repl::render(&outcome, quasi_repl::Style::Plain)))
    }

    /// A timing wrapper `time-NAME`: nanoseconds of one `(call NAME …)` (`square`: NAME takes
    /// n alone, as the MMult kernels do).
    fn wrap(&mut self, name: &str, ty: &str, square: bool) -> Result<()> {
        let call = if square { format!("(call {name} n a b c)") } else { format!("(call {name} n n n a b c)") };
        eval(
            &mut self.session,
            &format!(
                "(define ((time-{name} int64) (n int) (a (ptr {ty})) (b (ptr {ty})) (c (ptr {ty})))
                   (declare start int64) (set start (call clock-ns 1)) {call} (ret (sub (call clock-ns 1) start)))"
            ),
        )?;
        Ok(())
    }

    fn time<T>(&mut self, name: &str, ty: &str, n: i32, data: &mut Precision<T>) -> Result<Duration> {
        let text = value_of(&eval(
            &mut self.session,
            &format!(
                "(call time-{name} {n} (inttoptr {a} (ptr {ty})) (inttoptr {b} (ptr {ty})) (inttoptr {c} (ptr {ty})))",
                a = data.a.as_ptr() as usize,
                b = data.b.as_ptr() as usize,
                c = data.c.as_mut_ptr() as usize
            ),
        )?)?;
        Ok(Duration::from_nanos(text.parse().context("time-… gave no integer")?))
    }
}

/// One run of an implementation per row on `data` at size n, each row's C first set to `unset`
/// (so that an element left unwritten fails the check); `time_of` runs row `index` (`None`:
/// it does not run at this size). On `check`, each result is compared with the reference.
fn measure<T: Copy + Into<f64>>(
    rows: &mut [Row],
    data: &mut Precision<T>,
    n: i32,
    check: bool,
    tolerance: f64,
    unset: T,
    mut time_of: impl FnMut(usize, &mut Precision<T>) -> Result<Option<Duration>>,
) -> Result<()> {
    let count = (n * n) as usize;
    for (index, row) in rows.iter_mut().enumerate() {
        data.c[..count].fill(unset);
        if let Some(time) = time_of(index, data)? {
            row.record(n, time);
            if check && error(&data.c[..count], &data.reference) > tolerance {
                row.failed.push(format!("n={n}"));
            }
        }
    }
    Ok(())
}

/// The wall time of C = A·B through a CBLAS (row-major, no transposes, alpha 1, beta 0).
fn cblas<T: From<f32>>(gemm: Cblas<T>, n: i32, data: &mut Precision<T>) -> Duration {
    let (a, b, c) = (data.a.as_ptr(), data.b.as_ptr(), data.c.as_mut_ptr());
    timed(|| gemm(ROW_MAJOR, NO_TRANS, NO_TRANS, n, n, n, T::from(1.0), a, n, b, n, T::from(0.0), c, n))
}

/// The wall time of one call of a native implementation.
fn timed(run: impl FnOnce()) -> Duration {
    let start = Instant::now();
    run();
    start.elapsed()
}

/// Builds kernels/gemm.c at `config` ("(mr nr mc kc nc)") for `ty` into `folder`.
fn build_c(options: &Options, folder: &Path, ty: &str, config: &str) -> Result<(PathBuf, String)> {
    let numbers: Vec<i64> =
        config.trim_matches(|c| c == '(' || c == ')').split_whitespace().map(str::parse).collect::<Result<_, _>>()?;
    let [mr, nr, mc, kc, nc] = numbers[..] else { bail!("a configuration of five numbers, not {config}") };
    // gemm_config rounds mc and nc down to multiples of mr and nr; so does this build.
    let (mc, nc) = (mc - mc % mr, nc - nc % nr);
    let source = folder.join("gemm.c");
    std::fs::write(&source, include_str!("../kernels/gemm.c"))?;
    let library = folder.join(format!("libgemm-{ty}.so"));
    let defines = format!("-DT={ty} -DMR={mr} -DNR={nr} -DMC={mc} -DKC={kc} -DNC={nc} -DNAME=gemm_c");
    let status = Command::new(&options.clang)
        .args(["-O3", "-march=native", "-shared", "-fPIC", "-o"])
        .arg(&library)
        .args(defines.split(' '))
        .arg(&source)
        .arg("-lm")
        .status()
        .with_context(|| format!("running {}", options.clang))?;
    if !status.success() {
        bail!("{} failed on kernels/gemm.c ({defines})", options.clang);
    }
    Ok((library, defines))
}

/// The nominal clock in GHz and the core's peak single-precision FMA rate in GFLOP/s there:
/// two FMA units × lanes × 2 flops × the clock (double precision: half).
fn peak(bits: u32) -> Option<(f64, f64)> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let mhz: f64 =
        cpuinfo.lines().find_map(|line| line.strip_prefix("cpu MHz")?.split(':').nth(1)?.trim().parse().ok())?;
    let ghz = mhz / 1000.0;
    Some((ghz, 2.0 * f64::from(bits / 32) * 2.0 * ghz))
}

pub fn run(options: &Options) -> Result<()> {
    let quick = options.quick;
    let sizes: &[i32] = if quick { &QUICK_SIZES } else { &SIZES };
    let reps = options.reps.min(5);
    println!("quasi-bench: gemm (C = A·B, row-major n×n, single thread; GFLOP/s = 2n³ / the best of {reps} runs, sizes interleaved)");
    if !Path::new(OPENBLAS).exists() {
        println!("  skipped: {OPENBLAS} is missing (apt-get install libopenblas0-serial)\n");
        return Ok(());
    }
    let (core, rates) = fastest_core_type()?;
    let mut probe_table = new_table(&["OPENBLAS_CORETYPE", "SGEMM n=1024 GFLOP/s"], &[1]);
    for (label, rate) in rates {
        probe_table.add_row(vec![label, rate]);
    }
    println!("OpenBLAS core types this CPU has, each in its own process:\n{probe_table}");
    let core_label = if core.is_empty() { "its own choice".to_string() } else { core.clone() };
    println!("OpenBLAS below runs with OPENBLAS_CORETYPE={core_label}.\n");
    // Read when each library loads, before any of them is opened in this process; the
    // session's threads do not read these variables.
    std::env::set_var("OPENBLAS_NUM_THREADS", "1");
    std::env::set_var("BLIS_NUM_THREADS", "1");
    std::env::set_var("OMP_NUM_THREADS", "1");
    if core.is_empty() {
        std::env::remove_var("OPENBLAS_CORETYPE");
    } else {
        std::env::set_var("OPENBLAS_CORETYPE", &core);
    }
    let openblas = CLibrary::open(Path::new(OPENBLAS))?;
    let blis = Path::new(BLIS).exists().then(|| CLibrary::open(Path::new(BLIS))).transpose()?;
    // SAFETY: the CBLAS signatures of cblas_sgemm and cblas_dgemm.
    let (ob_s, ob_d) = unsafe {
        (
            std::mem::transmute::<*mut c_void, Sgemm>(openblas.symbol("cblas_sgemm")?),
            std::mem::transmute::<*mut c_void, Dgemm>(openblas.symbol("cblas_dgemm")?),
        )
    };
    let blis_fns = match &blis {
        // SAFETY: as above.
        Some(library) => Some(unsafe {
            (
                std::mem::transmute::<*mut c_void, Sgemm>(library.symbol("cblas_sgemm")?),
                std::mem::transmute::<*mut c_void, Dgemm>(library.symbol("cblas_dgemm")?),
            )
        }),
        None => None,
    };

    let largest = *sizes.iter().max().unwrap_or(&TUNE_SIZE) as usize;
    let count = largest * largest;
    let (mut single, mut double) = precisions(random(count, 1), random(count, 2));

    // Quasi: autotune, then the tuned definition's compile time at the default level.
    let mut quasi = Quasi::new()?;
    let tune_size = if quick { 512 } else { TUNE_SIZE };
    let whole =
        |count: usize, seed: usize| -> Vec<f64> { (0..count).map(|i| ((i * 7 + seed) % 13) as f64 - 6.0).collect() };
    let tune_count = (tune_size * tune_size) as usize;
    let (mut tune_single, mut tune_double) = precisions(whole(tune_count, 1), whole(tune_count, 5));
    let started = Instant::now();
    let (s_config, s_table) = quasi.tune("sgemm-q", "float", &mut tune_single, tune_size)?;
    let (d_config, d_table) = quasi.tune("dgemm-q", "double", &mut tune_double, tune_size)?;
    println!("Autotune at n = {tune_size} ({:.1} s for both):\n{s_table}\n{d_table}", started.elapsed().as_secs_f64());
    let mut compile = Vec::new();
    for (ty, config) in [("float", &s_config), ("double", &d_config)] {
        let name = format!("compile-{ty}");
        let start = Instant::now();
        eval(&mut quasi.session, &format!(",@(gemm_config {name} {ty} {config})"))?;
        compile.push(format!("{ty} {config}: {:.1} ms", start.elapsed().as_secs_f64() * 1e3));
    }
    println!("Compile time of the tuned GEMM cell at the default level: {}\n", compile.join(", "));
    for (name, ty, square) in [
        ("sgemm-q", "float", false),
        ("dgemm-q", "double", false),
        ("matmul", "double", true),
        ("matmul-1x4", "double", true),
        ("matmul-4x4", "double", true),
    ] {
        quasi.wrap(name, ty, square)?;
    }
    eval(&mut quasi.session, ":tier wait")?;

    let folder = tempfile::tempdir()?;
    let (s_lib, s_defines) = build_c(options, folder.path(), "float", &s_config)?;
    let (d_lib, d_defines) = build_c(options, folder.path(), "double", &d_config)?;
    let (c_s_lib, c_d_lib) = (CLibrary::open(&s_lib)?, CLibrary::open(&d_lib)?);
    // SAFETY: kernels/gemm.c's gemm_c at T = float and T = double.
    let (c_s, c_d) = unsafe {
        (
            std::mem::transmute::<*mut c_void, Generated<f32>>(c_s_lib.symbol("gemm_c")?),
            std::mem::transmute::<*mut c_void, Generated<f64>>(c_d_lib.symbol("gemm_c")?),
        )
    };

    let names = [
        "Quasi gemm (autotuned)".to_string(),
        format!("OpenBLAS 0.3.21 ({core_label})"),
        "BLIS 0.9 (1 thread)".to_string(),
        "clang -O3 -march=native, same structure".to_string(),
        "llama.lisp MMult i-k-j (Quasi :opt 3)".to_string(),
        "llama.lisp MMult_1x4 (Quasi)".to_string(),
        "llama.lisp MMult_4x4 (Quasi)".to_string(),
    ];
    let mut s_rows: Vec<Row> = names.iter().map(|_| Row::default()).collect();
    let mut d_rows: Vec<Row> = names.iter().map(|_| Row::default()).collect();
    for rep in 0..reps {
        for &n in sizes {
            let size = n as usize;
            let check = rep == 0;
            if check {
                let a: Vec<f64> = single.a[..size * size].iter().map(|&x| f64::from(x)).collect();
                let b: Vec<f64> = single.b[..size * size].iter().map(|&x| f64::from(x)).collect();
                single.reference = reference(size, &a, &b);
                double.reference = reference(size, &double.a[..size * size], &double.b[..size * size]);
            }
            measure(&mut s_rows, &mut single, n, check, 1e-5, f32::NAN, |index, data| {
                Ok(match index {
                    0 => Some(quasi.time("sgemm-q", "float", n, data)?),
                    1 => Some(cblas(ob_s, n, data)),
                    2 => blis_fns.map(|(sgemm, _)| cblas(sgemm, n, data)),
                    3 => Some(timed(|| c_s(n, n, n, data.a.as_ptr(), data.b.as_ptr(), data.c.as_mut_ptr()))),
                    _ => None,
                })
            })?;
            measure(&mut d_rows, &mut double, n, check, 1e-13, f64::NAN, |index, data| {
                Ok(match index {
                    0 => Some(quasi.time("dgemm-q", "double", n, data)?),
                    1 => Some(cblas(ob_d, n, data)),
                    2 => blis_fns.map(|(_, dgemm)| cblas(dgemm, n, data)),
                    3 => Some(timed(|| c_d(n, n, n, data.a.as_ptr(), data.b.as_ptr(), data.c.as_mut_ptr()))),
                    4..=6 if n <= MMULT_MAX && n % 4 == 0 && rep < 2 => {
                        let name = ["matmul", "matmul-1x4", "matmul-4x4"][index - 4];
                        data.c[..(n * n) as usize].fill(0.0);
                        Some(quasi.time(name, "double", n, data)?)
                    }
                    _ => None,
                })
            })?;
        }
    }

    let (ghz, s_peak) = peak(if is_avx512() { 512 } else { 256 }).unwrap_or((0.0, 0.0));
    let d_peak = s_peak / 2.0;
    for (label, rows, peak) in [("SGEMM (float)", &s_rows, s_peak), ("DGEMM (double)", &d_rows, d_peak)] {
        let mut header = vec!["implementation".to_string()];
        for n in sizes {
            header.push(format!("n={n} GFLOP/s"));
            header.push("vs OpenBLAS".to_string());
        }
        header.push("check".to_string());
        let header_refs: Vec<&str> = header.iter().map(String::as_str).collect();
        let right: Vec<usize> = (1..=2 * sizes.len()).collect();
        let mut table = new_table(&header_refs, &right);
        for (name, row) in names.iter().zip(rows.iter()) {
            if row.best.is_empty() {
                continue;
            }
            let mut cells = vec![name.clone()];
            for n in sizes {
                match (row.best.get(n), rows[1].best.get(n)) {
                    (Some(&time), Some(&reference)) => {
                        cells.push(format!("{:.1}", gflops(*n, time)));
                        cells.push(format!("{:.2}×", reference.as_secs_f64() / time.as_secs_f64()));
                    }
                    _ => cells.extend(["—".to_string(), "—".to_string()]),
                }
            }
            cells.push(if row.failed.is_empty() {
                "ok".to_string()
            } else {
                format!("WRONG at {}", row.failed.join(", "))
            });
            table.add_row(cells);
        }
        println!("{label}; the core's peak at the nominal {ghz:.2} GHz: {peak:.0} GFLOP/s (2 FMA units × lanes × 2; turbo runs above it)\n{table}");
        if let Some(best) =
            rows[0].best.iter().filter(|(n, _)| **n >= 1024).map(|(n, time)| gflops(*n, *time)).reduce(f64::max)
        {
            if peak > 0.0 {
                println!("Quasi's best at n ≥ 1024: {:.0}% of that peak.", 100.0 * best / peak);
            }
        }
        println!();
    }
    println!("clang builds: {s_defines}; {d_defines}. Checks: max |C − reference| / n ≤ 1e-5 (float), 1e-13 (double), reference in double precision.\n");
    Ok(())
}

#[cfg(target_arch = "x86_64")]
fn is_avx512() -> bool {
    is_x86_feature_detected!("avx512f")
}

#[cfg(not(target_arch = "x86_64"))]
fn is_avx512() -> bool {
    false
}
