//! NVIDIA's PTX assembler, when one is installed: `:ptx` ends with the registers, spills and
//! shared memory `ptxas -v` reports for the kernel, and the occupancy they allow. Quasi itself
//! never needs ptxas (the CUDA driver assembles PTX when a module is loaded); this is
//! inspection, and the project's tests assemble every kernel with it.
//!
//! Where ptxas is looked for, in order: `QUASI_PTXAS`, `PATH`, `$CUDA_HOME/bin`,
//! `$CUDA_PATH/bin`, `/usr/local/cuda/bin`, then the pip package `nvidia-cuda-nvcc-cu12`
//! (`nvidia/cuda_nvcc/bin/ptxas`) in the site-packages of the virtual environment in
//! `$VIRTUAL_ENV`, of the `python3` on `PATH` and of the user's `~/.local`. Only paths are
//! probed: no Python runs.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

/// What to do when no ptxas is found, for the last line of `:ptx`.
pub const HOW_TO_GET_PTXAS: &str = "pip install nvidia-cuda-nvcc-cu12, or set CUDA_HOME to a CUDA toolkit";

/// The first ptxas of the search order in the module documentation.
pub fn find() -> Option<PathBuf> {
    candidates().into_iter().find(|path| path.is_file())
}

/// Every place ptxas is looked for, in order.
fn candidates() -> Vec<PathBuf> {
    let variable = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty()).map(PathBuf::from);
    let mut found: Vec<PathBuf> = variable("QUASI_PTXAS").into_iter().collect();
    if let Some(path) = std::env::var_os("PATH") {
        found.extend(std::env::split_paths(&path).map(|directory| directory.join("ptxas")));
    }
    for toolkit in
        [variable("CUDA_HOME"), variable("CUDA_PATH"), Some(PathBuf::from("/usr/local/cuda"))].into_iter().flatten()
    {
        found.push(toolkit.join("bin").join("ptxas"));
    }
    let mut prefixes: Vec<PathBuf> = variable("VIRTUAL_ENV").into_iter().collect();
    if let Some(path) = std::env::var_os("PATH") {
        if let Some(python) =
            std::env::split_paths(&path).map(|directory| directory.join("python3")).find(|p| p.is_file())
        {
            // A venv's python3 links to the system's: both prefixes may hold the package.
            prefixes.extend(python.parent().and_then(Path::parent).map(Path::to_path_buf));
            if let Ok(resolved) = python.canonicalize() {
                prefixes.extend(resolved.parent().and_then(Path::parent).map(Path::to_path_buf));
            }
        }
    }
    prefixes.extend(variable("HOME").map(|home| home.join(".local")));
    for prefix in prefixes {
        let Ok(entries) = std::fs::read_dir(prefix.join("lib")) else { continue };
        let mut pythons: Vec<PathBuf> = entries
            .flatten()
            .filter(|entry| entry.file_name().to_string_lossy().starts_with("python3"))
            .map(|entry| entry.path())
            .collect();
        pythons.sort();
        for python in pythons {
            for packages in ["site-packages", "dist-packages"] {
                found.push(python.join(packages).join("nvidia/cuda_nvcc/bin/ptxas"));
            }
        }
    }
    found
}

/// What `ptxas -v` reports for a kernel: registers per thread, bytes spilled to local memory
/// (stores and loads, summed over the entry and the functions it calls), static shared memory
/// and the stack frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    /// Registers per thread.
    pub registers: u32,
    /// Bytes stored to local memory for want of registers.
    pub spill_stores: u64,
    /// Bytes loaded back from local memory.
    pub spill_loads: u64,
    /// Static shared memory of a block, in bytes.
    pub shared_bytes: u64,
    /// The largest stack frame, in bytes.
    pub stack_bytes: u64,
}

impl Resources {
    /// Whether anything spilled.
    pub fn spills(&self) -> bool {
        self.spill_stores > 0 || self.spill_loads > 0
    }
}

/// The number just before `suffix` in `text` (`"8 registers"` → 8).
fn number_before(text: &str, suffix: &str) -> Option<u64> {
    let end = text.find(suffix)?;
    text[..end].split_whitespace().last()?.parse().ok()
}

/// Reads `ptxas -v`'s report: the `Used N registers, … M bytes smem` line of the entry and the
/// `N bytes stack frame, N bytes spill stores, N bytes spill loads` lines of every function.
pub fn parse_verbose(output: &str) -> Option<Resources> {
    let mut resources = Resources::default();
    let mut used = false;
    for line in output.lines() {
        if let Some(registers) = line.find("Used ").and_then(|start| number_before(&line[start..], " registers")) {
            if !used {
                resources.registers = u32::try_from(registers).ok()?;
                resources.shared_bytes = number_before(line, " bytes smem").unwrap_or(0);
                used = true;
            }
        }
        if line.contains("bytes spill stores") {
            resources.spill_stores += number_before(line, " bytes spill stores")?;
            resources.spill_loads += number_before(line, " bytes spill loads")?;
            resources.stack_bytes = resources.stack_bytes.max(number_before(line, " bytes stack frame").unwrap_or(0));
        }
    }
    used.then_some(resources)
}

/// Assembles `ptx` with `ptxas -arch=ARCH -v` and reads its report. `name` names the PTX file
/// in ptxas's messages. An error is ptxas's own message lines (or why it could not run).
pub fn assemble(ptxas: &Path, ptx: &str, arch: &str, name: &str) -> Result<Resources, String> {
    static RUNS: AtomicU64 = AtomicU64::new(0);
    let run = RUNS.fetch_add(1, Ordering::Relaxed);
    let directory = std::env::temp_dir().join(format!("quasi-ptxas-{}-{run}", std::process::id()));
    std::fs::create_dir_all(&directory).map_err(|error| format!("cannot make {}: {error}", directory.display()))?;
    let file: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect();
    let result = (|| {
        std::fs::write(directory.join(format!("{file}.ptx")), ptx)
            .map_err(|error| format!("cannot write PTX: {error}"))?;
        // Run in the folder so that messages name `NAME.ptx`, not a temporary path.
        let output = Command::new(ptxas)
            .current_dir(&directory)
            .arg(format!("-arch={arch}"))
            .arg("-v")
            .arg(format!("{file}.ptx"))
            .arg("-o")
            .arg(format!("{file}.cubin"))
            .output()
            .map_err(|error| format!("cannot run {}: {error}", ptxas.display()))?;
        let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        if !output.status.success() {
            let errors: Vec<&str> =
                text.lines().filter(|line| !line.starts_with("ptxas info") && !line.trim().is_empty()).collect();
            return Err(if errors.is_empty() {
                format!("ptxas failed ({})", output.status)
            } else {
                errors.join("\n")
            });
        }
        parse_verbose(&text).ok_or_else(|| format!("ptxas reported no register count:\n{}", text.trim_end()))
    })();
    let _ = std::fs::remove_dir_all(&directory);
    result
}

/// The per-SM limits occupancy is computed against, as CUDA's occupancy calculator
/// (`cuda_occupancy.h`) has them.
#[derive(Clone, Copy, Debug)]
pub struct SmLimits {
    /// 32-bit registers of an SM.
    pub registers: u32,
    /// Registers are split evenly between the SM's sub-partitions; a warp lives in one.
    pub sub_partitions: u32,
    /// Registers are allocated per warp, in units of this many.
    pub register_unit: u32,
    /// The most registers ptxas gives a thread.
    pub max_registers_per_thread: u32,
    /// Resident warps of an SM.
    pub warps: u32,
    /// Resident blocks of an SM.
    pub blocks: u32,
    /// The most threads a block may have.
    pub threads_per_block: u32,
    /// Shared memory of an SM, in bytes.
    pub shared_bytes: u64,
    /// The most shared memory a block may have, in bytes.
    pub shared_per_block: u64,
    /// Shared memory the CUDA runtime keeps for itself in every block.
    pub reserved_shared_per_block: u64,
    /// Shared memory is allocated in units of this many bytes.
    pub shared_unit: u64,
}

/// Compute capability 9.0 (H100): 65536 registers, 64 warps (2048 threads), 32 blocks and
/// 228 KiB of shared memory per SM, at most 227 KiB per block.
pub const SM_90: SmLimits = SmLimits {
    registers: 65536,
    sub_partitions: 4,
    register_unit: 256,
    max_registers_per_thread: 255,
    warps: 64,
    blocks: 32,
    threads_per_block: 1024,
    shared_bytes: 228 * 1024,
    shared_per_block: 227 * 1024,
    reserved_shared_per_block: 1024,
    shared_unit: 128,
};

/// What bounds the blocks resident on an SM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limiter {
    /// The SM's warps (threads).
    Warps,
    /// The SM's block count.
    Blocks,
    /// The register file.
    Registers,
    /// Shared memory.
    SharedMemory,
}

impl Limiter {
    /// The limit in words, for `:ptx`'s line.
    pub fn word(self) -> &'static str {
        match self {
            Limiter::Warps => "warps",
            Limiter::Blocks => "blocks",
            Limiter::Registers => "registers",
            Limiter::SharedMemory => "shared memory",
        }
    }
}

/// Blocks and warps resident on one SM for a launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Occupancy {
    /// Resident blocks.
    pub blocks: u32,
    /// Resident warps.
    pub warps: u32,
    /// The SM's warps.
    pub max_warps: u32,
    /// What stops one more block; `None` when not even one block fits.
    pub limiter: Option<Limiter>,
}

impl Occupancy {
    /// Active warps as a percentage of the SM's, rounded down.
    pub fn percent(&self) -> u32 {
        self.warps * 100 / self.max_warps.max(1)
    }
}

fn round_up(value: u64, unit: u64) -> u64 {
    value.div_ceil(unit) * unit
}

/// The occupancy of blocks of `threads` threads of a kernel using `registers` registers per
/// thread and `shared_bytes` of static shared memory, as CUDA's occupancy calculator computes it.
pub fn occupancy(limits: &SmLimits, registers: u32, shared_bytes: u64, threads: u32) -> Occupancy {
    let none = Occupancy { blocks: 0, warps: 0, max_warps: limits.warps, limiter: None };
    if threads == 0 || threads > limits.threads_per_block || registers > limits.max_registers_per_thread {
        return none;
    }
    let warps_per_block = threads.div_ceil(32);
    let mut bounds = vec![(limits.warps / warps_per_block, Limiter::Warps), (limits.blocks, Limiter::Blocks)];
    if registers > 0 {
        let per_warp = round_up(u64::from(registers) * 32, u64::from(limits.register_unit));
        // The hardware's check: a block's warps spread over the sub-partitions.
        let block_registers = per_warp * round_up(u64::from(warps_per_block), u64::from(limits.sub_partitions));
        if block_registers > u64::from(limits.registers) {
            return none;
        }
        let per_partition = u64::from(limits.registers / limits.sub_partitions) / per_warp;
        let warps = per_partition * u64::from(limits.sub_partitions);
        bounds.push(((warps / u64::from(warps_per_block)) as u32, Limiter::Registers));
    }
    if shared_bytes > 0 {
        if shared_bytes > limits.shared_per_block {
            return none;
        }
        let per_block = round_up(shared_bytes + limits.reserved_shared_per_block, limits.shared_unit);
        bounds.push(((limits.shared_bytes / per_block) as u32, Limiter::SharedMemory));
    }
    let (blocks, limiter) = bounds.into_iter().min_by_key(|(blocks, _)| *blocks).unwrap_or((0, Limiter::Blocks));
    if blocks == 0 {
        return none;
    }
    Occupancy { blocks, warps: blocks * warps_per_block, max_warps: limits.warps, limiter: Some(limiter) }
}

/// The block sizes `:ptx` gives occupancy for when no launch of the kernel is known.
pub const TYPICAL_BLOCKS: [u32; 4] = [128, 256, 512, 1024];

/// `:ptx`'s last line for a kernel ptxas assembled: `ptxas sm_90: 10 registers, 0 bytes spill
/// stores, 0 bytes spill loads, 0 bytes smem; occupancy 100% (64/64 warps) at 256 threads (the
/// last launch)`, or at `TYPICAL_BLOCKS` when `block` (the last launch's threads) is unknown.
pub fn resource_line(arch: &str, resources: &Resources, block: Option<u32>) -> String {
    let at = |threads: u32| occupancy(&SM_90, resources.registers, resources.shared_bytes, threads);
    let mut line = format!(
        "ptxas {arch}: {} registers, {} bytes spill stores, {} bytes spill loads, {} bytes smem; ",
        resources.registers, resources.spill_stores, resources.spill_loads, resources.shared_bytes
    );
    match block {
        Some(threads) => {
            let occupancy = at(threads);
            match occupancy.limiter {
                Some(limiter) => line.push_str(&format!(
                    "occupancy {}% ({}/{} warps, bound by {}) at {threads} threads (the last launch)",
                    occupancy.percent(),
                    occupancy.warps,
                    occupancy.max_warps,
                    limiter.word()
                )),
                None => line.push_str(&format!("a block of {threads} threads (the last launch) does not fit on an SM")),
            }
        }
        None => {
            let parts: Vec<String> =
                TYPICAL_BLOCKS.iter().map(|&threads| format!("{}% at {threads}", at(threads).percent())).collect();
            line.push_str(&format!("occupancy {} threads", parts.join(", ")));
        }
    }
    if !arch.starts_with("sm_90") {
        line.push_str(" (by sm_90's limits)");
    }
    line
}

/// `:ptx`'s last line when there is no ptxas.
pub fn missing_line() -> String {
    format!("ptxas: not found, so no register count ({HOW_TO_GET_PTXAS})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbose_output_is_read() {
        let output = "ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'ones' for 'sm_90'
ptxas info    : Function properties for helper
    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas info    : Function properties for ones
    16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 1024 bytes smem, 360 bytes cmem[0]
ptxas info    : Compile time = 4.077 ms";
        let expected =
            Resources { registers: 40, spill_stores: 12, spill_loads: 16, shared_bytes: 1024, stack_bytes: 16 };
        assert_eq!(parse_verbose(output), Some(expected));
        assert!(expected.spills());
        let plain = "ptxas info    : Function properties for k\n    0 bytes stack frame, 0 bytes spill stores, 0 \
                     bytes spill loads\nptxas info    : Used 6 registers, 360 bytes cmem[0]";
        let resources = parse_verbose(plain).expect("a report");
        assert_eq!((resources.registers, resources.shared_bytes, resources.spills()), (6, 0, false));
        assert_eq!(parse_verbose("ptxas fatal   : Ptx assembly aborted due to errors"), None);
    }

    #[test]
    fn occupancy_follows_the_sm_90_limits() {
        let at = |registers, shared, threads| {
            let occupancy = occupancy(&SM_90, registers, shared, threads);
            (occupancy.blocks, occupancy.warps, occupancy.percent(), occupancy.limiter)
        };
        // Few registers: threads bound it (2048 per SM), or the 32 blocks for small blocks.
        assert_eq!(at(16, 0, 256), (8, 64, 100, Some(Limiter::Warps)));
        assert_eq!(at(16, 0, 32), (32, 32, 50, Some(Limiter::Blocks)));
        assert_eq!(at(16, 0, 1024), (2, 64, 100, Some(Limiter::Warps)));
        // 40 registers: 1280 a warp, 12 warps in each 16384-register sub-partition, 48 warps.
        assert_eq!(at(40, 0, 256), (6, 48, 75, Some(Limiter::Registers)));
        // 128 registers: 4096 a warp, 16 warps; 255 registers: 8192 a warp, 8 warps.
        assert_eq!(at(128, 0, 256), (2, 16, 25, Some(Limiter::Registers)));
        assert_eq!(at(255, 0, 256), (1, 8, 12, Some(Limiter::Registers)));
        assert_eq!(at(255, 0, 512).3, None);
        // Shared memory: 48 KiB plus the 1 KiB reserve, 4 blocks in 228 KiB.
        assert_eq!(at(16, 48 * 1024, 128), (4, 16, 25, Some(Limiter::SharedMemory)));
        assert_eq!(at(16, 227 * 1024, 128).0, 1);
        assert_eq!(at(16, 227 * 1024 + 1, 128).0, 0);
        // A block of 1025 threads never launches.
        assert_eq!(at(16, 0, 1025), (0, 0, 0, None));
        // A partial warp counts as a whole one.
        assert_eq!(at(16, 0, 48), (32, 64, 100, Some(Limiter::Warps)));
    }

    #[test]
    fn resource_lines_name_the_block_size() {
        let resources = Resources { registers: 40, spill_stores: 0, spill_loads: 0, shared_bytes: 0, stack_bytes: 0 };
        assert_eq!(
            resource_line("sm_90", &resources, Some(256)),
            "ptxas sm_90: 40 registers, 0 bytes spill stores, 0 bytes spill loads, 0 bytes smem; \
             occupancy 75% (48/64 warps, bound by registers) at 256 threads (the last launch)"
        );
        assert_eq!(
            resource_line("sm_80", &resources, None),
            "ptxas sm_80: 40 registers, 0 bytes spill stores, 0 bytes spill loads, 0 bytes smem; \
             occupancy 75% at 128, 75% at 256, 75% at 512, 50% at 1024 threads (by sm_90's limits)"
        );
        assert!(missing_line().contains("pip install nvidia-cuda-nvcc-cu12"));
    }
}
