//! Generated code against clang: eight kernels written twice, in C-Lisp (`kernels/*.cl`, run in a
//! session at `:opt 3` and in one at the default, tiered, setting) and in C (`kernels/*.c`, built with clang-19 -O3 -march=native into a
//! shared library at bench time and dlopened), timed alike in one process, checksums compared.

use std::ffi::{c_void, CString};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use quasi_lang::{Session, SessionConfig};

use crate::stats::{ms, ms_of, Samples};
use crate::{eval, new_table, value_of, Options};

/// One kernel in both languages. C-Lisp names it `NAME-setup`/`NAME-run` (`_` spelled `-`),
/// C `NAME_setup`/`NAME_run`; `setup(n)` allocates and fills the input (untimed), `run()` does
/// the work and returns an `int64` checksum (timed). Kernels on doubles hash the bits of their
/// results, so a checksum matches only when every bit does.
#[derive(Clone, Copy)]
pub struct Kernel {
    pub name: &'static str,
    /// What one run does, for the table.
    pub work: &'static str,
    pub size: i32,
    /// The small size the unit test runs, and the checksum clang's build gives there (read
    /// only by the test).
    #[cfg_attr(not(test), allow(dead_code))]
    pub test_size: i32,
    #[cfg_attr(not(test), allow(dead_code))]
    pub test_checksum: &'static str,
    pub clisp: &'static str,
    pub c: &'static str,
}

impl Kernel {
    fn clisp_name(&self) -> String {
        self.name.replace('_', "-")
    }
}

pub(crate) const COMMON_CLISP: &str = include_str!("../kernels/common.cl");
pub(crate) const COMMON_HEADER: &str = include_str!("../kernels/common.h");

pub const KERNELS: [Kernel; 8] = [
    Kernel {
        name: "matmul",
        work: "2 x (512x512 double matrix product, i-k-j)",
        size: 512,
        test_size: 24,
        test_checksum: "4956588584591586569",
        clisp: include_str!("../kernels/matmul.cl"),
        c: include_str!("../kernels/matmul.c"),
    },
    Kernel {
        name: "matmul_1x4",
        work: "2 x (512x512 double product, 1x4 blocks, int indices)",
        size: 512,
        test_size: 24,
        test_checksum: "4956588584591586569",
        clisp: include_str!("../kernels/matmul_1x4.cl"),
        c: include_str!("../kernels/matmul_1x4.c"),
    },
    Kernel {
        name: "matmul_4x4",
        work: "4 x (512x512 double product, 4x4 blocks, int indices)",
        size: 512,
        test_size: 24,
        test_checksum: "4956588584591586569",
        clisp: include_str!("../kernels/matmul_4x4.cl"),
        c: include_str!("../kernels/matmul_4x4.c"),
    },
    Kernel {
        name: "sieve",
        work: "primes up to 16,000,000 (byte flags)",
        size: 16_000_000,
        test_size: 10_000,
        test_checksum: "1229",
        clisp: include_str!("../kernels/sieve.cl"),
        c: include_str!("../kernels/sieve.c"),
    },
    Kernel {
        name: "nbody",
        work: "16 steps of 1024 bodies, all pairs, sqrt",
        size: 1024,
        test_size: 32,
        test_checksum: "5775164917478677144",
        clisp: include_str!("../kernels/nbody.cl"),
        c: include_str!("../kernels/nbody.c"),
    },
    Kernel {
        name: "quicksort",
        work: "1,000,000 random ints, recursive Hoare",
        size: 1_000_000,
        test_size: 5_000,
        test_checksum: "9142604351535630",
        clisp: include_str!("../kernels/quicksort.cl"),
        c: include_str!("../kernels/quicksort.c"),
    },
    Kernel {
        name: "prefix_sum",
        work: "128 x in-place scan of 1,000,000 int64",
        size: 1_000_000,
        test_size: 5_000,
        test_checksum: "-6782859997482279965",
        clisp: include_str!("../kernels/prefix_sum.cl"),
        c: include_str!("../kernels/prefix_sum.c"),
    },
    Kernel {
        name: "fib",
        work: "fib(36), doubly recursive",
        size: 36,
        test_size: 20,
        test_checksum: "6765",
        clisp: include_str!("../kernels/fib.cl"),
        c: include_str!("../kernels/fib.c"),
    },
];

/// The C-Lisp side: one session holding every kernel and a timing wrapper per kernel.
pub struct ClispKernels {
    session: Session,
}

impl ClispKernels {
    /// Evaluates the common definitions and every kernel at `level` (`None`: the default, tiered
    /// compilation, waiting at the end until every function is promoted), each file as one cell.
    pub fn new(kernels: &[Kernel], level: Option<u8>) -> Result<ClispKernels> {
        let mut session = Session::new(SessionConfig::default())?;
        if let Some(level) = level {
            eval(&mut session, &format!(":opt {level}"))?;
        }
        eval(&mut session, COMMON_CLISP).context("kernels/common.cl")?;
        for kernel in kernels {
            eval(&mut session, kernel.clisp).with_context(|| format!("kernels/{}.cl", kernel.name))?;
            // The clocks are read inside compiled code, around one call of the kernel, so nothing
            // of the cell's compilation is timed; the call through `NAME-run`'s slot costs
            // nanoseconds against runs of tens of milliseconds. It returns the thread's CPU time
            // and leaves the wall time and the checksum in globals.
            let name = kernel.clisp_name();
            let wrapper = format!(
                "(define-global (bench-result-{name} int64))
                 (define-global (bench-wall-{name} int64))
                 (define ((bench-time-{name} int64))
                   (declare wall int64)
                   (declare cpu int64)
                   (set wall (call clock-ns 1))
                   (set cpu (call clock-ns 3))
                   (set bench-result-{name} (call {name}-run))
                   (set cpu (sub (call clock-ns 3) cpu))
                   (set bench-wall-{name} (sub (call clock-ns 1) wall))
                   (ret cpu))"
            );
            eval(&mut session, &wrapper).with_context(|| format!("the timing wrapper of {name}"))?;
        }
        if level.is_none() {
            eval(&mut session, ":tier wait")?;
        }
        Ok(ClispKernels { session })
    }

    pub fn setup(&mut self, kernel: &Kernel, size: i32) -> Result<()> {
        eval(&mut self.session, &format!("(call {}-setup {size})", kernel.clisp_name()))?;
        Ok(())
    }

    /// One timed run, as the compiled code measured it.
    pub fn run(&mut self, kernel: &Kernel) -> Result<Run> {
        let name = kernel.clisp_name();
        let nanoseconds =
            |text: String| text.parse::<u64>().map(Duration::from_nanos).context("a clock gave no integer");
        let cpu = nanoseconds(value_of(&eval(&mut self.session, &format!("(call bench-time-{name})"))?)?)?;
        let wall = nanoseconds(value_of(&eval(&mut self.session, &format!("bench-wall-{name}"))?)?)?;
        let checksum = value_of(&eval(&mut self.session, &format!("bench-result-{name}"))?)?;
        Ok(Run { cpu, wall, checksum })
    }
}

/// One timed run of a kernel.
pub struct Run {
    /// CPU time of the thread that ran it (CLOCK_THREAD_CPUTIME_ID).
    pub cpu: Duration,
    /// Wall time (CLOCK_MONOTONIC).
    pub wall: Duration,
    pub checksum: String,
}

/// The CPU time this thread has used, as `clock-ns 3` reads it in compiled code.
fn thread_cpu_time() -> Duration {
    let mut time = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut time) };
    Duration::new(time.tv_sec as u64, time.tv_nsec as u32)
}

/// The C side: a shared library built by clang in this run.
pub(crate) struct CLibrary {
    handle: *mut c_void,
}

impl CLibrary {
    pub(crate) fn open(path: &Path) -> Result<CLibrary> {
        let path_text = CString::new(path.as_os_str().as_encoded_bytes()).context("library path with a NUL byte")?;
        // SAFETY: dlopen with a NUL-terminated path. RTLD_LOCAL keeps the C kernels' symbols out
        // of the global namespace the session's JIT searches for external declarations.
        let handle = unsafe { libc::dlopen(path_text.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            bail!("dlopen {}: {}", path.display(), dl_error());
        }
        Ok(CLibrary { handle })
    }

    pub(crate) fn symbol(&self, name: &str) -> Result<*mut c_void> {
        let symbol_name = CString::new(name).context("symbol name with a NUL byte")?;
        // SAFETY: dlsym on a live handle with a NUL-terminated name only reads.
        let address = unsafe { libc::dlsym(self.handle, symbol_name.as_ptr()) };
        if address.is_null() {
            bail!("dlsym {name}: {}", dl_error());
        }
        Ok(address)
    }

    pub(crate) fn setup(&self, kernel: &Kernel, size: i32) -> Result<()> {
        let address = self.symbol(&format!("{}_setup", kernel.name))?;
        // SAFETY: every kernels/*.c defines `void NAME_setup(int n)`, built in this run.
        let setup: extern "C" fn(i32) = unsafe { std::mem::transmute::<*mut c_void, extern "C" fn(i32)>(address) };
        setup(size);
        Ok(())
    }

    /// One timed run: the same two clocks as the C-Lisp side reads, around one call.
    pub(crate) fn run(&self, kernel: &Kernel) -> Result<Run> {
        let address = self.symbol(&format!("{}_run", kernel.name))?;
        // SAFETY: every kernels/*.c defines `int64_t NAME_run(void)`, built in this run.
        let run: extern "C" fn() -> i64 =
            unsafe { std::mem::transmute::<*mut c_void, extern "C" fn() -> i64>(address) };
        let wall = Instant::now();
        let cpu = thread_cpu_time();
        let checksum = run();
        let cpu = thread_cpu_time().saturating_sub(cpu);
        Ok(Run { cpu, wall: wall.elapsed(), checksum: checksum.to_string() })
    }
}

impl Drop for CLibrary {
    fn drop(&mut self) {
        // SAFETY: the handle came from dlopen and no function of it is called after this.
        unsafe { libc::dlclose(self.handle) };
    }
}

fn dl_error() -> String {
    // SAFETY: dlerror returns a thread-local message or null; it is copied at once.
    let message = unsafe { libc::dlerror() };
    if message.is_null() {
        return "unknown error".into();
    }
    // SAFETY: non-null dlerror results are NUL-terminated strings.
    unsafe { std::ffi::CStr::from_ptr(message) }.to_string_lossy().into_owned()
}

/// A scratch directory for the C sources and libraries, removed when dropped.
pub(crate) struct ScratchDirectory(pub(crate) PathBuf);

impl ScratchDirectory {
    pub(crate) fn new() -> Result<ScratchDirectory> {
        // Unique within the process too: tests make theirs at the same time.
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let index = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("quasi-bench-{}-{index}", std::process::id()));
        std::fs::create_dir_all(&path).with_context(|| format!("cannot create {}", path.display()))?;
        Ok(ScratchDirectory(path))
    }
}

impl Drop for ScratchDirectory {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The C builds, all of the same sources. The first is the reference of the goal:
/// `-ffp-contract=off` because C-Lisp never contracts `a*b+c` into an FMA (docs/language.md §4:
/// results are identical at every level), so only then can every checksum match. The others
/// are shown for information: clang's default (`-ffp-contract=on`, FMAs allowed) and
/// `-fwrapv`, which gives C C-Lisp's integer semantics (signed overflow wraps, §4), so that
/// what that costs C is visible next to what it costs C-Lisp. Every build starts each function
/// on a 64-byte line, as Quasi does at levels 2 and 3 (`backend::align_functions`): where code
/// lies within a line moves the same machine code by up to a third (fib: 32.7–43.5 ms on Zen 4),
/// which would otherwise decide ratios by luck.
pub(crate) const C_BUILDS: [(&str, &[&str]); 3] = [
    ("clang", &["-O3", "-march=native", "-ffp-contract=off", "-falign-functions=64"]),
    ("clang default", &["-O3", "-march=native", "-falign-functions=64"]),
    ("clang -fwrapv", &["-O3", "-march=native", "-ffp-contract=off", "-fwrapv", "-falign-functions=64"]),
];

/// Builds `sources` (in `directory`) with `flags` into `directory/NAME.so`.
pub(crate) fn build_library(
    clang: &str,
    directory: &Path,
    flags: &[&str],
    sources: &[PathBuf],
    name: &str,
) -> Result<(PathBuf, Duration)> {
    let output_path = directory.join(format!("{name}.so"));
    let start = Instant::now();
    let output = Command::new(clang)
        .args(flags)
        .args(["-fPIC", "-shared", "-o"])
        .arg(&output_path)
        .args(sources)
        .arg("-lm")
        .output()
        .with_context(|| format!("cannot run {clang} (set CLANG or --clang)"))?;
    if !output.status.success() {
        bail!("{clang} failed:\n{}", String::from_utf8_lossy(&output.stderr));
    }
    Ok((output_path, start.elapsed()))
}

/// Builds every C build, or none when clang is missing or fails.
fn c_builds(options: &Options, directory: &Path) -> Result<Vec<PathBuf>> {
    std::fs::write(directory.join("common.h"), COMMON_HEADER)?;
    for kernel in &KERNELS {
        std::fs::write(directory.join(format!("{}.c", kernel.name)), kernel.c)?;
    }
    let sources: Vec<PathBuf> = KERNELS.iter().map(|kernel| directory.join(format!("{}.c", kernel.name))).collect();
    let mut libraries = Vec::new();
    for (index, (_, flags)) in C_BUILDS.iter().enumerate() {
        match build_library(&options.clang, directory, flags, &sources, &format!("libkernels{index}")) {
            Ok((path, time)) => {
                if index == 0 {
                    println!(
                        "{} built the reference library ({}) from {} C files in {} ms",
                        options.clang,
                        flags.join(" "),
                        KERNELS.len(),
                        ms(time)
                    );
                }
                libraries.push(path);
            }
            Err(error) => {
                println!("no C reference: {error:#}\n(C-Lisp times only)");
                return Ok(Vec::new());
            }
        }
    }
    Ok(libraries)
}

/// Opens a fresh copy of each built library: a new file, so the loader maps it anew, at another
/// address than the copies of earlier placements.
fn open_copies(builds: &[PathBuf], placement: usize) -> Result<Vec<CLibrary>> {
    builds
        .iter()
        .map(|path| {
            let copy = path.with_file_name(format!(
                "{}-placement{placement}.so",
                path.file_stem().map_or_else(String::new, |stem| stem.to_string_lossy().into_owned())
            ));
            std::fs::copy(path, &copy).with_context(|| format!("cannot copy {}", path.display()))?;
            CLibrary::open(&copy)
        })
        .collect()
}

/// Timings and checksums of one implementation of one kernel.
#[derive(Default)]
pub(crate) struct Measured {
    cpu: Vec<Duration>,
    wall: Vec<Duration>,
    pub(crate) checksum: String,
    /// The best CPU time of each placement ended so far (`end_placement`).
    placements: Vec<Duration>,
    /// Where in `cpu` the current placement's runs start.
    placement_start: usize,
}

impl Measured {
    pub(crate) fn add(&mut self, run: Run) {
        self.cpu.push(run.cpu);
        self.wall.push(run.wall);
        self.checksum = run.checksum;
    }

    /// Closes the current placement: its best run is kept.
    fn end_placement(&mut self) {
        if let Some(best) = self.cpu[self.placement_start..].iter().min() {
            self.placements.push(*best);
        }
        self.placement_start = self.cpu.len();
    }

    pub(crate) fn cpu(&self) -> Samples {
        Samples::new(self.cpu.clone())
    }
}

/// One kernel's measurements: C-Lisp at `:opt 3` and at the default level, and each C build of
/// `C_BUILDS` in order (none without clang).
struct KernelResult<'k> {
    kernel: &'k Kernel,
    clisp: Measured,
    clisp_default: Measured,
    c: Vec<Measured>,
}

pub fn run(options: &Options) -> Result<()> {
    println!("== Generated code: C-Lisp at :opt 3 against clang-19 ==");
    let scratch = ScratchDirectory::new()?;
    let builds = c_builds(options, &scratch.0)?;
    let mut results: Vec<KernelResult<'_>> = KERNELS
        .iter()
        .map(|kernel| KernelResult {
            kernel,
            clisp: Measured::default(),
            clisp_default: Measured::default(),
            c: builds.iter().map(|_| Measured::default()).collect(),
        })
        .collect();
    // Each placement loads the code anew on both sides, at other addresses: fresh copies of the
    // C libraries and two fresh sessions. One process keeps one placement for all its runs, and
    // the same machine code has run up to 1.5x slower in one than another (fib: 50-77 ms on
    // either side, in spells of seconds that also follow the shared machine), so a single
    // placement can decide a ratio by luck.
    // Earlier placements' libraries and sessions stay loaded until the end, so that no later one
    // is mapped where they were.
    let mut loaded = Vec::new();
    for placement in 0..options.placements {
        let libraries = open_copies(&builds, placement)?;
        let start = Instant::now();
        let mut clisp = ClispKernels::new(&KERNELS, Some(3))?;
        let compiled = start.elapsed();
        let start = Instant::now();
        let mut clisp_default = ClispKernels::new(&KERNELS, None)?;
        if placement == 0 {
            println!("the session compiled every C-Lisp kernel at :opt 3 in {} ms", ms(compiled));
            println!(
                "a second session, at the default setting (tiered: opt 1, promoted to opt 3 in the background), \
                 defined them and had every function promoted in {} ms",
                ms(start.elapsed())
            );
        }
        for result in &mut results {
            let kernel = result.kernel;
            // One untimed warm-up run each, then repetitions interleaved so that drifts of the
            // machine (frequency, other builds) fall on all of them alike. `setup` before every
            // run restores the input of kernels that work in place; it writes all the memory the
            // run touches, so no page fault is timed.
            for repetition in 0..=options.reps {
                let timed = repetition > 0;
                for (index, library) in libraries.iter().enumerate() {
                    library.setup(kernel, kernel.size)?;
                    let run = library.run(kernel)?;
                    if timed {
                        result.c[index].add(run);
                    }
                    if index == 0 {
                        // C-Lisp right after the reference, so the two compared share conditions.
                        clisp_runs(&mut clisp, &mut clisp_default, result, timed)?;
                    }
                }
                if libraries.is_empty() {
                    clisp_runs(&mut clisp, &mut clisp_default, result, timed)?;
                }
            }
            for measured in result.c.iter_mut().chain([&mut result.clisp, &mut result.clisp_default]) {
                measured.end_placement();
            }
        }
        loaded.push((libraries, clisp, clisp_default));
    }
    print_results(&results, options);
    Ok(())
}

/// One run of a kernel in each C-Lisp session, `:opt 3` first.
fn clisp_runs(
    clisp: &mut ClispKernels,
    clisp_default: &mut ClispKernels,
    result: &mut KernelResult<'_>,
    timed: bool,
) -> Result<()> {
    for (session, measured) in [(clisp, &mut result.clisp), (clisp_default, &mut result.clisp_default)] {
        session.setup(result.kernel, result.kernel.size)?;
        let run = session.run(result.kernel)?;
        if timed {
            measured.add(run);
        }
    }
    Ok(())
}

/// The geometric mean of ratios, or "-" when there are none.
fn geometric_mean(ratios: impl Iterator<Item = f64>) -> String {
    let logs: Vec<f64> = ratios.map(f64::ln).collect();
    if logs.is_empty() {
        return "-".into();
    }
    format!("{:.2}", (logs.iter().sum::<f64>() / logs.len() as f64).exp())
}

/// The ratio `ours / reference` of the best times of each placement, sorted; empty without a
/// reference.
fn placement_ratios(ours: &Measured, reference: &Measured) -> Vec<f64> {
    let mut ratios: Vec<f64> = ours
        .placements
        .iter()
        .zip(&reference.placements)
        .filter(|(_, reference)| !reference.is_zero())
        .map(|(ours, reference)| ours.as_secs_f64() / reference.as_secs_f64())
        .collect();
    ratios.sort_by(f64::total_cmp);
    ratios
}

/// The median of sorted numbers (the mean of the middle two of an even count).
fn median(sorted: &[f64]) -> Option<f64> {
    match sorted.len() {
        0 => None,
        count if count % 2 == 1 => Some(sorted[count / 2]),
        count => Some((sorted[count / 2 - 1] + sorted[count / 2]) / 2.0),
    }
}

fn two_places(number: Option<f64>) -> String {
    number.map_or_else(|| "-".into(), |number| format!("{number:.2}"))
}

fn ratio_of(numerator: Duration, denominator: Duration) -> Option<f64> {
    (!denominator.is_zero()).then(|| numerator.as_secs_f64() / denominator.as_secs_f64())
}

pub(crate) fn ratio(numerator: Duration, denominator: Duration) -> String {
    two_places(ratio_of(numerator, denominator))
}

/// Whether two checksums agree ("-" when there is no reference).
pub(crate) fn compare(ours: &str, reference: &str) -> &'static str {
    match (ours, reference) {
        (_, "") => "-",
        _ if ours == reference => "same",
        _ => "DIFFERENT",
    }
}

fn print_results(results: &[KernelResult<'_>], options: &Options) {
    let mut table = new_table(
        &[
            "kernel",
            "work per run",
            "clang best ms",
            "C-Lisp best ms",
            "ratio best",
            "goal <= 1.05",
            "by placement: median",
            "range",
            "ratio best, wall",
            "tiered best ms",
            "ratio best, tiered",
        ],
        &[2, 3, 4, 6, 7, 8, 9, 10],
    );
    let empty = Measured::default();
    let mut bests = Vec::new();
    let mut bests_default = Vec::new();
    for result in results {
        let reference = result.c.first().unwrap_or(&empty);
        let (c, q) = (reference.cpu(), result.clisp.cpu());
        let (c_wall, q_wall) = (Samples::new(reference.wall.clone()), Samples::new(result.clisp.wall.clone()));
        let ratios = placement_ratios(&result.clisp, reference);
        let best = ratio_of(q.best(), c.best());
        let best_default = ratio_of(result.clisp_default.cpu().best(), c.best());
        bests.extend(best);
        bests_default.extend(best_default);
        let verdict = match best {
            None => "-",
            Some(ratio) if ratio <= 1.05 => "meets",
            Some(_) => "misses",
        };
        let range = match (ratios.first(), ratios.last()) {
            (Some(low), Some(high)) => format!("{low:.2}-{high:.2}"),
            _ => "-".into(),
        };
        table.add_row(vec![
            result.kernel.name.to_string(),
            result.kernel.work.to_string(),
            ms_of(&c, Samples::best),
            ms_of(&q, Samples::best),
            two_places(best),
            verdict.to_string(),
            two_places(median(&ratios)),
            range,
            ratio(q_wall.best(), c_wall.best()),
            ms_of(&result.clisp_default.cpu(), Samples::best),
            two_places(best_default),
        ]);
    }
    let mean = geometric_mean(bests.into_iter());
    let blank = String::new;
    table.add_row(vec![
        "geo-mean".to_string(),
        "of the ratios of best times".to_string(),
        blank(),
        blank(),
        mean.clone(),
        if mean == "-" { "-".into() } else { "goal <= 1.00".into() },
        blank(),
        blank(),
        blank(),
        blank(),
        geometric_mean(bests_default.into_iter()),
    ]);
    println!(
        "\nclang = clang-19 {} -fPIC -shared of kernels/*.c, dlopened; C-Lisp = kernels/*.cl in one session\n\
         at :opt 3 (the last two columns: in a session at the default setting, tiered compilation, once every\n\
         function was promoted to opt 3 in the background). Ratio = C-Lisp time / clang time\n\
         (lower is better for C-Lisp). The goal: every ratio at :opt 3 <= 1.05, their geometric mean <= 1.00,\n\
         on the ratio of the best runs over all placements (slowdowns of a shared machine only add time).\n\
         Method: {} placements; in each, everything is loaded anew (fresh copies of the C libraries, dlopened\n\
         at new addresses, and two fresh C-Lisp sessions, with new code memory), then {} timed runs per\n\
         kernel and build after one warm-up run, interleaved (clang, C-Lisp in both sessions, then the other\n\
         C builds). `by placement`: each placement's best C-Lisp run over its best clang run, the median\n\
         and range of those (how much placement and the machine's slow spells move one process's ratio).\n\
         Before each run an untimed `setup` rebuilds the input and writes all memory the run\n\
         touches. A run is one call of the kernel's `run` function (>= 50 ms of work). Times are the CPU time of\n\
         the thread running the kernel (CLOCK_THREAD_CPUTIME_ID: time spent preempted by other processes is not\n\
         counted), read around that one call: by compiled C-Lisp code (a declared `clock_gettime` in\n\
         `bench-time-NAME`, around `(call NAME-run)`) and by Rust around the dlsym'd C function, so no\n\
         compilation is timed. `ratio best, wall` takes CLOCK_MONOTONIC instead. Placement is alike on both\n\
         sides, so that ratios compare code, not luck: every function starts on a 64-byte line and every array\n\
         on a page (`bench-alloc`). Unlike that, the same fib took 32.7-43.5 ms by its offset in a line, and\n\
         the same matmul 23.0-27.7 ms by where C lay from B modulo 4096.",
        C_BUILDS[0].1.join(" "),
        options.placements,
        options.reps
    );
    println!("{table}\n");
    let mut header = vec!["kernel".to_string(), "C-Lisp checksum".to_string(), "vs clang".to_string()];
    for (name, _) in C_BUILDS.iter().skip(1) {
        header.extend([
            format!("{name} best ms"),
            format!("C-Lisp / {name}, by placement: median"),
            format!("{name} checksum"),
        ]);
    }
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let right: Vec<usize> = (0..C_BUILDS.len() - 1).flat_map(|build| [3 + 3 * build, 4 + 3 * build]).collect();
    let mut checks = new_table(&header, &right);
    for result in results {
        let reference = result.c.first().map_or("", |measured| measured.checksum.as_str());
        let mut row = vec![
            result.kernel.name.to_string(),
            result.clisp.checksum.clone(),
            compare(&result.clisp.checksum, reference).to_string(),
        ];
        for measured in result.c.iter().skip(1) {
            row.extend([
                ms_of(&measured.cpu(), Samples::best),
                two_places(median(&placement_ratios(&result.clisp, measured))),
                compare(&measured.checksum, reference).to_string(),
            ]);
        }
        checks.add_row(row);
    }
    println!(
        "Checksums (doubles hashed bit by bit; `same` = equal to the clang reference's), and two more C builds for"
    );
    println!(
        "information, not for the goal: clang's default -O3 -march=native (fp-contract=on: it may fuse a*b+c into"
    );
    println!(
        "one FMA, which C-Lisp never does, so its results may differ), and the reference flags plus -fwrapv (signed"
    );
    println!("overflow wraps, as in C-Lisp: C then has to sign-extend 32-bit indices as C-Lisp does).");
    println!("{checks}\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each placement keeps its own best run, and ratios pair placements in order.
    #[test]
    fn placements_pair_their_best_runs() {
        let run =
            |ms: u64| Run { cpu: Duration::from_millis(ms), wall: Duration::from_millis(ms), checksum: "1".into() };
        let (mut ours, mut reference) = (Measured::default(), Measured::default());
        for (our_runs, reference_runs) in [([12, 11], [10, 12]), ([30, 31], [20, 25]), ([9, 9], [10, 11])] {
            our_runs.into_iter().for_each(|ms| ours.add(run(ms)));
            reference_runs.into_iter().for_each(|ms| reference.add(run(ms)));
            ours.end_placement();
            reference.end_placement();
        }
        let ratios = placement_ratios(&ours, &reference);
        let rounded = |numbers: &[f64]| numbers.iter().map(|number| format!("{number:.3}")).collect::<Vec<_>>();
        assert_eq!(rounded(&ratios), ["0.900", "1.100", "1.500"]);
        assert_eq!(two_places(median(&ratios)), "1.10");
        assert_eq!(two_places(median(&ratios[..2])), "1.00");
        assert_eq!(median(&[]), None);
        assert_eq!(ours.cpu().best(), Duration::from_millis(9));
    }

    /// Every C-Lisp kernel compiles and gives clang's checksum at a small size, unoptimised, at
    /// `:opt 3` and promoted by tiered compilation (results never depend on the level). No clang
    /// needed: the expected values were taken from the C versions once.
    #[test]
    fn kernels_give_the_c_checksums_at_small_sizes() -> Result<()> {
        for level in [Some(0), Some(3), None] {
            let mut kernels = ClispKernels::new(&KERNELS, level)?;
            for kernel in &KERNELS {
                kernels.setup(kernel, kernel.test_size)?;
                let run = kernels.run(kernel)?;
                assert_eq!(run.checksum, kernel.test_checksum, "{} at {level:?}", kernel.name);
            }
        }
        Ok(())
    }
}
