//! What C-Lisp's wrapping `int` (docs/language.md §4) costs a data-dependent scan, and whether
//! any exact form wins it back: the quicksort kernel (`kernels/quicksort.c`) as clang builds it
//! with C's undefined overflow (the reference of the kernel goal) and with `-fwrapv`, the
//! partition loop in three more C forms (`kernels/quicksort_forms.c`: 64-bit indices, not exact;
//! exact with a wrap check per step; exact and versioned, one check per block of four), and
//! C-Lisp's twin at `:opt 3` with `int` indices and with `int64` ones, all timed interleaved in
//! one process.
//!
//! Why it matters: quicksort's scans `while (a[i] < pivot) i++` stop on data, so no loop bound
//! proves that `i` never wraps and the index must be sign-extended on every step (or checked);
//! the kernel bench's quicksort ratio is that cost.

use anyhow::{Context, Result};

use crate::kernels::{
    build_library, compare, ratio, CLibrary, ClispKernels, Kernel, Measured, ScratchDirectory, COMMON_HEADER, C_BUILDS,
    KERNELS,
};
use crate::stats::{ms_of, Samples};
use crate::{new_table, Options};

const FORMS_SOURCE: &str = include_str!("../kernels/quicksort_forms.c");

/// C-Lisp's quicksort with `int64` indices (after `kernels/quicksort.cl`, whose setup it uses).
const WIDE: Kernel = Kernel {
    name: "quicksort_wide",
    work: "quicksort.cl's sort with int64 indices",
    size: 1_000_000,
    test_size: 5_000,
    test_checksum: "9142604351535630",
    clisp: include_str!("../kernels/quicksort_wide.cl"),
    c: "",
};

/// Each C build: its name, whether its `int` arithmetic is exact under §4, the source, and the
/// flags beyond the reference's.
const BUILDS: [(&str, &str, &str, &[&str]); 5] = [
    ("clang, int indices (reference)", "no: overflow is UB", "quicksort.c", &[]),
    ("clang -fwrapv, int indices", "yes", "quicksort.c", &["-fwrapv"]),
    ("clang -fwrapv, int64 indices", "no: never wraps", "quicksort_forms.c", &["-fwrapv", "-DQUICKSORT_FORM=1"]),
    ("clang -fwrapv, wrap checked per step", "yes", "quicksort_forms.c", &["-fwrapv", "-DQUICKSORT_FORM=2"]),
    ("clang -fwrapv, versioned: 1 check per 4 steps", "yes", "quicksort_forms.c", &["-fwrapv", "-DQUICKSORT_FORM=3"]),
];

/// Builds every form of `BUILDS` into `scratch`, in order.
fn build(clang: &str, scratch: &ScratchDirectory) -> Result<Vec<CLibrary>> {
    std::fs::write(scratch.0.join("common.h"), COMMON_HEADER)?;
    std::fs::write(scratch.0.join("quicksort.c"), quicksort()?.c)?;
    std::fs::write(scratch.0.join("quicksort_forms.c"), FORMS_SOURCE)?;
    let mut libraries = Vec::new();
    for (index, (_, _, source, extra)) in BUILDS.iter().enumerate() {
        // The kernel bench's reference flags, and more.
        let flags: Vec<&str> = C_BUILDS[0].1.iter().chain(extra.iter()).copied().collect();
        let (path, _) = build_library(clang, &scratch.0, &flags, &[scratch.0.join(source)], &format!("libqs{index}"))?;
        libraries.push(CLibrary::open(&path)?);
    }
    Ok(libraries)
}

fn quicksort() -> Result<&'static Kernel> {
    KERNELS.iter().find(|kernel| kernel.name == "quicksort").context("no quicksort kernel")
}

pub fn run(options: &Options) -> Result<()> {
    println!("== What exact wrapping costs quicksort's scans (C forms and C-Lisp at :opt 3) ==");
    let kernel = quicksort()?;
    let scratch = ScratchDirectory::new()?;
    let libraries = match build(&options.clang, &scratch) {
        Ok(libraries) => libraries,
        Err(error) => {
            println!("no C builds: {error:#}\n(skipped)\n");
            return Ok(());
        }
    };
    let mut clisp = ClispKernels::new(&[*kernel, WIDE], Some(3))?;
    let mut c: Vec<Measured> = BUILDS.iter().map(|_| Measured::default()).collect();
    let (mut ours, mut ours_wide) = (Measured::default(), Measured::default());
    for repetition in 0..=options.reps {
        let timed = repetition > 0;
        for (library, measured) in libraries.iter().zip(c.iter_mut()) {
            library.setup(kernel, kernel.size)?;
            let run = library.run(kernel)?;
            if timed {
                measured.add(run);
            }
        }
        for (twin, measured) in [(kernel, &mut ours), (&WIDE, &mut ours_wide)] {
            clisp.setup(twin, twin.size)?;
            let run = clisp.run(twin)?;
            if timed {
                measured.add(run);
            }
        }
    }
    let reference = c[0].cpu();
    let mut table =
        new_table(&["build", "§4-exact", "best ms", "median ms", "/ reference, best", "checksum"], &[2, 3, 4]);
    let rows = BUILDS.iter().map(|(name, exact, _, _)| (*name, *exact)).zip(c.iter());
    let clisp_rows = [
        (("C-Lisp :opt 3, int indices (the twin)", "yes"), &ours),
        (("C-Lisp :opt 3, int64 indices", "yes: int64 wraps at 2^63"), &ours_wide),
    ];
    for ((name, exact), measured) in rows.chain(clisp_rows) {
        let samples = measured.cpu();
        table.add_row(vec![
            name.to_string(),
            exact.to_string(),
            ms_of(&samples, Samples::best),
            ms_of(&samples, Samples::median),
            ratio(samples.best(), reference.best()),
            compare(&measured.checksum, &c[0].checksum).to_string(),
        ]);
    }
    println!(
        "{} ({}), {} timed runs each after a warm-up, interleaved; thread CPU time around one call of\n\
         quicksort_run / quicksort-run, as in the kernel bench. Every form is the same Hoare partition\n\
         (kernels/quicksort_forms.c says how each steps its indices); `same` = the reference's checksum.\n\
         The §4-exact forms are what C-Lisp may compile its `int` scans to; only the inexact ones\n\
         reach the reference, whose speed comes from C's freedom to assume `i + 1` never overflows,\n\
         and C-Lisp does when the program's indices are `int64` (kernels/quicksort_wide.cl).",
        kernel.name, kernel.work, options.reps
    );
    println!("{table}\n");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every C form, and C-Lisp's sort with `int64` indices, sorts and gives the kernel's
    /// checksum at the unit-test size (clang-19, which the test command installs, builds the C).
    #[test]
    fn every_form_sorts_alike() -> Result<()> {
        let scratch = ScratchDirectory::new()?;
        let kernel = quicksort()?;
        for (library, (name, ..)) in build(&crate::default_clang(), &scratch)?.iter().zip(BUILDS) {
            library.setup(kernel, kernel.test_size)?;
            assert_eq!(library.run(kernel)?.checksum, kernel.test_checksum, "{name}");
        }
        let mut clisp = ClispKernels::new(&[*kernel, WIDE], Some(3))?;
        clisp.setup(&WIDE, WIDE.test_size)?;
        assert_eq!(clisp.run(&WIDE)?.checksum, kernel.test_checksum);
        Ok(())
    }
}
