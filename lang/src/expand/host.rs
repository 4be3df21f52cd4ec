//! `host_cpu()` for Rhai (docs/language.md §6.4): what a generator needs to fit code to the CPU
//! the session compiles for — LLVM's name for it, the vector width and register count its
//! features give, and the data caches' sizes — so a generator can prune a tuning space to what
//! fits the registers and caches (the prelude's `gemm_configs`, §8).

use std::path::Path;

use inkwell::targets::TargetMachine;
use rhai::{Dynamic, Map, INT};

/// The host as a Rhai map: `name` (LLVM's CPU name, e.g. `znver3`), `vector_bits` (512 with
/// AVX-512F, 256 with AVX, else 128), `vector_registers` (32 with AVX-512F, else 16), `fma`,
/// and `l1d`, `l2`, `l3`: the cache sizes in bytes cpu0 sees (0 where sysfs does not say).
pub(super) fn host_cpu() -> Map {
    let name = TargetMachine::get_host_cpu_name().to_string_lossy().into_owned();
    let features = TargetMachine::get_host_cpu_features().to_string_lossy().into_owned();
    let has = |feature: &str| features.split(',').any(|item| item.strip_prefix('+') == Some(feature));
    let vector_bits: INT = if has("avx512f") {
        512
    } else if has("avx") {
        256
    } else {
        128
    };
    let caches = cache_sizes(Path::new("/sys/devices/system/cpu/cpu0/cache"));
    let mut map = Map::new();
    map.insert("name".into(), name.into());
    map.insert("vector_bits".into(), Dynamic::from_int(vector_bits));
    map.insert("vector_registers".into(), Dynamic::from_int(if has("avx512f") { 32 } else { 16 }));
    map.insert("fma".into(), Dynamic::from_bool(has("fma")));
    for (key, size) in [("l1d", caches.l1d), ("l2", caches.l2), ("l3", caches.l3)] {
        map.insert(key.into(), Dynamic::from_int(size));
    }
    map
}

#[derive(Debug, Default, PartialEq)]
struct Caches {
    l1d: INT,
    l2: INT,
    l3: INT,
}

/// The data and unified caches under `folder` (sysfs's `indexN/{level,type,size}`).
fn cache_sizes(folder: &Path) -> Caches {
    let mut caches = Caches::default();
    let Ok(entries) = std::fs::read_dir(folder) else { return caches };
    for entry in entries.flatten() {
        let read = |file: &str| std::fs::read_to_string(entry.path().join(file)).unwrap_or_default();
        let kind = read("type");
        if kind.trim() == "Instruction" {
            continue;
        }
        let Some(size) = parse_size(read("size").trim()) else { continue };
        match read("level").trim() {
            "1" => caches.l1d = size,
            "2" => caches.l2 = size,
            "3" => caches.l3 = size,
            _ => {}
        }
    }
    caches
}

/// sysfs's `32K`, `1024K`, `32M` (or plain bytes).
fn parse_size(text: &str) -> Option<INT> {
    let (digits, scale) = match text.chars().last()? {
        'K' => (&text[..text.len() - 1], 1024),
        'M' => (&text[..text.len() - 1], 1024 * 1024),
        'G' => (&text[..text.len() - 1], 1024 * 1024 * 1024),
        _ => (text, 1),
    };
    digits.parse::<INT>().ok().map(|value| value * scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_sysfs_writes_them() {
        assert_eq!(parse_size("32K"), Some(32 * 1024));
        assert_eq!(parse_size("1024K"), Some(1024 * 1024));
        assert_eq!(parse_size("32M"), Some(32 * 1024 * 1024));
        assert_eq!(parse_size("512"), Some(512));
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("lots"), None);
    }

    #[test]
    fn caches_are_read_from_a_sysfs_folder_and_instruction_caches_skipped() {
        let folder = std::env::temp_dir().join(format!("quasi-caches-{}", std::process::id()));
        for (index, level, kind, size) in [
            (0, "1", "Data", "48K"),
            (1, "1", "Instruction", "32K"),
            (2, "2", "Unified", "1024K"),
            (3, "3", "Unified", "32M"),
        ] {
            let dir = folder.join(format!("index{index}"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("level"), format!("{level}\n")).unwrap();
            std::fs::write(dir.join("type"), format!("{kind}\n")).unwrap();
            std::fs::write(dir.join("size"), format!("{size}\n")).unwrap();
        }
        let caches = cache_sizes(&folder);
        std::fs::remove_dir_all(&folder).unwrap();
        assert_eq!(caches, Caches { l1d: 48 * 1024, l2: 1024 * 1024, l3: 32 * 1024 * 1024 });
        assert_eq!(cache_sizes(Path::new("/no/such/folder")), Caches::default());
    }
}
