//! Reading a source file (`:load`, `rhai-file`, `quasi run`, `quasi test`): only a regular
//! file, and at most `MAX_SOURCE_BYTES` of it, so that `/dev/zero`, a pipe or a huge file is an
//! error at once instead of a read until memory runs out.

use std::io::Read;

use crate::diagnostics::{Diagnostic, Kind};

/// The most bytes a source file may have: 64 MiB.
pub const MAX_SOURCE_BYTES: u64 = 64 << 20;

/// The text of the source file at `path`: `error[io]` when it cannot be read, is not a regular
/// file or is not UTF-8, `error[limit]` when it has more than `MAX_SOURCE_BYTES`.
pub fn read_source(path: &str) -> Result<String, Diagnostic> {
    let io = |error: std::io::Error| Diagnostic::error(Kind::Io, format!("cannot read `{path}`: {error}"));
    let too_large = |bytes: u64| {
        Diagnostic::error(
            Kind::Limit,
            format!("`{path}` has {bytes} bytes, more than the {} MiB a source file may have", MAX_SOURCE_BYTES >> 20),
        )
    };
    let metadata = std::fs::metadata(path).map_err(io)?;
    if !metadata.is_file() {
        return Err(Diagnostic::error(
            Kind::Io,
            format!("cannot read `{path}`: not a regular file (a device, a pipe or a directory); sources are files"),
        ));
    }
    if metadata.len() > MAX_SOURCE_BYTES {
        return Err(too_large(metadata.len()));
    }
    // At most one byte past the limit, should the file have grown since.
    let mut text = String::new();
    std::fs::File::open(path).and_then(|file| file.take(MAX_SOURCE_BYTES + 1).read_to_string(&mut text)).map_err(io)?;
    if text.len() as u64 > MAX_SOURCE_BYTES {
        return Err(too_large(text.len() as u64));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_directories_and_huge_files_are_refused_before_reading() {
        let error = read_source("/dev/zero").unwrap_err();
        assert_eq!((error.kind, error.message.contains("not a regular file")), (Kind::Io, true), "{}", error.message);
        assert_eq!(read_source("/").unwrap_err().kind, Kind::Io);
        assert_eq!(read_source("/no/such/file.cl").unwrap_err().kind, Kind::Io);
        let directory = std::env::temp_dir().join(format!("quasi-files-{}", std::process::id()));
        std::fs::create_dir_all(&directory).unwrap();
        let huge = directory.join("huge.cl");
        // Sparse: no 64 MiB written.
        std::fs::File::create(&huge).unwrap().set_len(MAX_SOURCE_BYTES + 1).unwrap();
        let error = read_source(huge.to_str().unwrap()).unwrap_err();
        assert_eq!(error.kind, Kind::Limit, "{}", error.message);
        let small = directory.join("small.cl");
        std::fs::write(&small, "(add 1 2)").unwrap();
        assert_eq!(read_source(small.to_str().unwrap()).unwrap(), "(add 1 2)");
        std::fs::remove_dir_all(&directory).unwrap();
    }
}
