//! The object cache of `quasi run`: object files on disk, keyed by the exact IR they were
//! compiled from and by everything else that decides their bytes (the engine binary, the
//! host CPU and its features, the optimisation level). A program run again skips the
//! optimiser and code generation, most of a small program's start-up.
//!
//! An entry's file is named by a hash of its key and holds the whole key, compared byte for
//! byte on every lookup: a hash collision can only miss. Entries are written to a temporary
//! file and renamed, so a reader sees a whole entry or none. A lookup touches the entry's
//! modification time; past `BUDGET` bytes the least recently used entries are removed. The
//! folder must be the user's own and writable by nobody else (an object in it is code this
//! user will run).
//!
//! The tuning cache (`crate::tune_cache`) is a store of the same kind, with entries of its own
//! (a `Format`): everything above holds for it too.

use std::cell::{OnceCell, RefCell};
use std::fs::File;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

/// What a store holds: how its entries begin, end their names, are named in messages, and
/// how many bytes of them it keeps.
#[derive(Debug)]
pub(crate) struct Format {
    /// The first bytes of every entry; a new format gets a new magic.
    magic: &'static [u8],
    /// What an entry's file name ends with.
    extension: &'static str,
    /// The store in messages: "the object cache".
    what: &'static str,
    /// The bytes it may hold before its least recently used entries go.
    budget: u64,
}

impl Format {
    pub(crate) const fn new(magic: &'static [u8], extension: &'static str, what: &'static str, budget: u64) -> Format {
        Format { magic, extension, what, budget }
    }
}

/// The bytes the object cache may hold before its least recently used entries go.
pub const BUDGET: u64 = 256 << 20;

/// Compiled objects (`quasi run`).
pub(crate) static OBJECTS: Format = Format::new(b"quasi-obj-1\n", "qo", "the object cache", BUDGET);
/// One store in this many checks the budget (a check lists the folder).
const PRUNE_EVERY: u64 = 16;
/// Temporary files older than this were left by a process that died while writing.
const STALE_TEMPORARY: Duration = Duration::from_secs(3600);

/// The environment variable that turns the cache off (`off` or `0`) or names its folder.
pub const CACHE_VARIABLE: &str = "QUASI_CACHE";

/// The folder `name` of Quasi's in the user's cache: `$XDG_CACHE_HOME/quasi/NAME`, else
/// `~/.cache/quasi/NAME`; `None` when there is no home to put it in.
pub(crate) fn quasi_cache_folder(name: &str) -> Option<PathBuf> {
    let setting = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty());
    let base = setting("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|path| path.is_absolute())
        .or_else(|| setting("HOME").map(|home| Path::new(&home).join(".cache")))?;
    Some(base.join("quasi").join(name))
}

/// A folder of compiled objects (or, with another `Format`, of other entries).
#[derive(Debug)]
pub struct ObjectCache {
    directory: PathBuf,
    format: &'static Format,
    /// Whether the folder may be used: checked once, when first needed.
    usable: OnceCell<Result<(), String>>,
    /// What went wrong with the cache since the last `take_problems` (each told once).
    problems: RefCell<Vec<String>>,
}

/// An entry's file: when it was last used, its bytes, its path.
type Entry = (SystemTime, u64, PathBuf);

/// What the folder holds: entries, and temporary files with when they were written.
#[derive(Default)]
struct Listing {
    entries: Vec<Entry>,
    temporaries: Vec<(SystemTime, PathBuf)>,
}

/// The key of one object: a header naming what besides the IR decides the object, then the IR.
pub(crate) struct ObjectKey {
    bytes: Vec<u8>,
    /// The entry's file name, hashed from `bytes` once.
    file_name: String,
}

impl ObjectKey {
    /// The key of IR `ir` compiled by a back end that `backend` describes (CPU, features,
    /// level: whatever the engine binary does not fix).
    pub(crate) fn new(backend: &str, ir: &[u8]) -> ObjectKey {
        let mut bytes = Vec::with_capacity(ir.len() + backend.len() + 96);
        bytes.extend_from_slice(engine_identity().as_bytes());
        bytes.push(b'\n');
        bytes.extend_from_slice(backend.as_bytes());
        bytes.extend_from_slice(b"\n\n");
        bytes.extend_from_slice(ir);
        ObjectKey::from_bytes(bytes, OBJECTS.extension)
    }

    /// The name of the entry's file.
    pub(crate) fn file_name(&self) -> &str {
        &self.file_name
    }

    /// The key `bytes`, whole, for a store whose entries end their names with `extension`.
    pub(crate) fn from_bytes(bytes: Vec<u8>, extension: &str) -> ObjectKey {
        // 128 bits of hash, in hex.
        let half = |seed: u8| {
            let mut hasher = DefaultHasher::new();
            seed.hash(&mut hasher);
            bytes.hash(&mut hasher);
            hasher.finish()
        };
        let file_name = format!("{:016x}{:016x}.{extension}", half(0), half(1));
        ObjectKey { bytes, file_name }
    }
}

/// The engine binary this process runs, by device, inode, size and modification time: a
/// rebuilt or upgraded engine (another LLVM, other passes, other code generation) never
/// reads objects an older one wrote.
fn engine_identity() -> &'static str {
    static IDENTITY: OnceLock<String> = OnceLock::new();
    IDENTITY.get_or_init(|| {
        let binary = std::env::current_exe().and_then(std::fs::metadata);
        match binary {
            Ok(metadata) => format!(
                "engine {} {} {} {}.{:09} quasi {}",
                metadata.dev(),
                metadata.ino(),
                metadata.size(),
                metadata.mtime(),
                metadata.mtime_nsec(),
                env!("CARGO_PKG_VERSION")
            ),
            // Unknown: a key no other process can make, so nothing is shared.
            Err(_) => format!("engine unknown, process {}", std::process::id()),
        }
    })
}

impl ObjectCache {
    /// The cache in `directory` (made when the first object is stored).
    pub fn new(directory: impl Into<PathBuf>) -> ObjectCache {
        ObjectCache::with_format(directory, &OBJECTS)
    }

    /// A store of `format`'s entries in `directory`.
    pub(crate) fn with_format(directory: impl Into<PathBuf>, format: &'static Format) -> ObjectCache {
        ObjectCache { directory: directory.into(), format, usable: OnceCell::new(), problems: RefCell::default() }
    }

    /// The cache the environment asks for: `QUASI_CACHE=off` (or `0`) for none, `QUASI_CACHE=DIR`
    /// for that folder, else `$XDG_CACHE_HOME/quasi/objects` or `~/.cache/quasi/objects`.
    /// `None` also when there is no home to put it in.
    pub fn from_environment() -> Option<ObjectCache> {
        Self::from_environment_as(CACHE_VARIABLE, "objects", &OBJECTS)
    }

    /// The store `variable` asks for (`off` or `0`: none; else its folder), else the folder
    /// `name` in `$XDG_CACHE_HOME/quasi` or `~/.cache/quasi`.
    pub(crate) fn from_environment_as(variable: &str, name: &str, format: &'static Format) -> Option<ObjectCache> {
        let setting = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty());
        match setting(variable) {
            Some(value) if value == "off" || value == "0" => return None,
            Some(folder) => return Some(ObjectCache::with_format(folder, format)),
            None => {}
        }
        Some(ObjectCache::with_format(quasi_cache_folder(name)?, format))
    }

    /// The cache's folder.
    pub fn directory(&self) -> &Path {
        &self.directory
    }

    /// The object stored under `key`, if any; a hit makes the entry the most recently used.
    pub(crate) fn lookup(&self, key: &ObjectKey) -> Option<Vec<u8>> {
        self.check_usable(false).ok()?;
        let mut file = File::open(self.directory.join(&key.file_name)).ok()?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).ok()?;
        let whole = || {
            let rest = bytes.strip_prefix(self.format.magic)?;
            let (length, rest) = rest.split_first_chunk::<8>()?;
            let length = usize::try_from(u64::from_le_bytes(*length)).ok()?;
            (rest.len() >= length).then_some((length, rest))
        };
        let Some((length, rest)) = whole() else {
            self.note_corrupt(&key.file_name);
            return None;
        };
        // Another key of the same hash (or a file copied in by hand): a miss, nothing wrong.
        if rest[..length] != key.bytes[..] {
            return None;
        }
        // SAFETY: futimens on a descriptor we hold; a null `times` means "now".
        unsafe { libc::futimens(file.as_raw_fd(), std::ptr::null()) };
        let start = bytes.len() - (rest.len() - length);
        Some(bytes.split_off(start))
    }

    /// Stores `object` under `key`. A failure is noted for `take_problems`, once per kind.
    pub(crate) fn store(&self, key: &ObjectKey, object: &[u8]) {
        // A folder that may not be used was noted as such.
        if self.check_usable(true).is_err() {
            return;
        }
        if let Err(error) = self.try_store(key, object) {
            self.note(format!("{} in {} was not written: {error}", self.format.what, self.directory.display()));
        }
    }

    fn try_store(&self, key: &ObjectKey, object: &[u8]) -> Result<(), String> {
        let name = &key.file_name;
        let path = self.directory.join(name);
        let temporary = self.directory.join(format!("{name}.{}.tmp", std::process::id()));
        let written = File::create(&temporary).and_then(|mut file| {
            file.write_all(self.format.magic)?;
            file.write_all(&(key.bytes.len() as u64).to_le_bytes())?;
            file.write_all(&key.bytes)?;
            file.write_all(object)
        });
        if let Err(error) = written.and_then(|()| std::fs::rename(&temporary, &path)) {
            let _ = std::fs::remove_file(&temporary);
            return Err(error.to_string());
        }
        // A cheap, fair coin: the first bits of the name's hash.
        if u64::from_str_radix(&name[..16], 16).unwrap_or(0).is_multiple_of(PRUNE_EVERY) {
            self.prune(self.format.budget).map_err(|error| format!("cannot trim it: {error}"))?;
        }
        Ok(())
    }

    /// Whether the folder may be used, made if `create`. Checked once: a folder another user
    /// owns or may write to is never read (its objects would run as this user).
    fn check_usable(&self, create: bool) -> Result<(), String> {
        if let Some(verdict) = self.usable.get() {
            return verdict.clone();
        }
        // Followed if a link: what counts is whose the folder is and who may write to it.
        let metadata = match std::fs::metadata(&self.directory) {
            // Not yet made: nothing to read, and nothing decided until a store makes it.
            Err(error) if error.kind() == io::ErrorKind::NotFound && !create => return Err(error.to_string()),
            Err(error) if error.kind() == io::ErrorKind::NotFound => std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&self.directory)
                .and_then(|()| std::fs::metadata(&self.directory)),
            other => other,
        };
        let verdict = match metadata {
            Err(error) => Err(error.to_string()),
            Ok(metadata) if !metadata.is_dir() => Err("it is not a folder".to_string()),
            // SAFETY: getuid cannot fail.
            Ok(metadata) if metadata.uid() != unsafe { libc::getuid() } => Err("another user owns it".to_string()),
            Ok(metadata) if metadata.mode() & 0o022 != 0 => Err("others may write to it".to_string()),
            Ok(_) => Ok(()),
        };
        if let Err(reason) = &verdict {
            self.note(format!("{} in {} is not used: {reason}", self.format.what, self.directory.display()));
        }
        self.usable.set(verdict.clone()).ok();
        verdict
    }

    /// Notes that the entry `file_name` is not one this store writes (cut short, or another
    /// format): it is ignored, and a store over it replaces it.
    pub(crate) fn note_corrupt(&self, file_name: &str) {
        self.note(format!(
            "{} ignored a damaged entry, {}",
            self.format.what,
            self.directory.join(file_name).display()
        ));
    }

    fn note(&self, problem: String) {
        let mut problems = self.problems.borrow_mut();
        if !problems.contains(&problem) {
            problems.push(problem);
        }
    }

    /// What went wrong since the last call: warnings for the front end to show.
    pub fn take_problems(&self) -> Vec<String> {
        std::mem::take(&mut self.problems.borrow_mut())
    }

    /// The entries, with their sizes and last use, and temporary files left behind.
    fn list(&self) -> io::Result<Listing> {
        let mut listing = Listing::default();
        for entry in std::fs::read_dir(&self.directory)? {
            let entry = entry?;
            let path = entry.path();
            let Ok(metadata) = entry.metadata() else { continue };
            let used = metadata.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            match path.extension().and_then(|extension| extension.to_str()) {
                Some(extension) if extension == self.format.extension => {
                    listing.entries.push((used, metadata.len(), path))
                }
                Some("tmp") => listing.temporaries.push((used, path)),
                _ => {}
            }
        }
        Ok(listing)
    }

    /// Removes least recently used entries until the rest fit in `budget` bytes, and temporary
    /// files a dead writer left. Returns how many entries went, and their bytes.
    pub fn prune(&self, budget: u64) -> io::Result<(usize, u64)> {
        let Listing { mut entries, temporaries } = self.list()?;
        let now = SystemTime::now();
        for (written, path) in temporaries {
            if now.duration_since(written).is_ok_and(|age| age > STALE_TEMPORARY) {
                let _ = std::fs::remove_file(path);
            }
        }
        let mut total: u64 = entries.iter().map(|(_, size, _)| size).sum();
        entries.sort();
        let mut removed = (0, 0);
        for (_, size, path) in entries {
            if total <= budget {
                break;
            }
            std::fs::remove_file(path)?;
            total -= size;
            removed = (removed.0 + 1, removed.1 + size);
        }
        Ok(removed)
    }

    /// The number of entries and their bytes (`quasi cache`); none if the folder is missing.
    pub fn usage(&self) -> io::Result<(usize, u64)> {
        match self.list() {
            Ok(Listing { entries, .. }) => Ok((entries.len(), entries.iter().map(|(_, size, _)| size).sum())),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok((0, 0)),
            Err(error) => Err(error),
        }
    }

    /// Removes every entry (`quasi cache clear`); returns how many there were and their bytes.
    pub fn clear(&self) -> io::Result<(usize, u64)> {
        match self.prune(0) {
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok((0, 0)),
            removed => removed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let directory = std::env::temp_dir().join(format!("quasi-cache-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&directory);
        directory
    }

    #[test]
    fn an_object_stored_is_found_under_the_same_key_only() {
        let directory = scratch("roundtrip");
        let cache = ObjectCache::new(&directory);
        let key = ObjectKey::new("cpu znver4 level 3", b"define i32 @f() { ret i32 1 }");
        assert_eq!(cache.lookup(&key), None);
        cache.store(&key, b"\x7fELF object bytes");
        assert_eq!(cache.take_problems(), Vec::<String>::new());
        assert_eq!(cache.lookup(&key).as_deref(), Some(&b"\x7fELF object bytes"[..]));
        let other_level = ObjectKey::new("cpu znver4 level 1", b"define i32 @f() { ret i32 1 }");
        let other_ir = ObjectKey::new("cpu znver4 level 3", b"define i32 @f() { ret i32 2 }");
        assert_eq!(cache.lookup(&other_level), None);
        assert_eq!(cache.lookup(&other_ir), None);
        assert_eq!(cache.usage().unwrap().0, 1);
        let mode = std::fs::metadata(&directory).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700, "the folder is made private");
        std::fs::remove_dir_all(&directory).unwrap();
    }

    #[test]
    fn an_entry_whose_key_differs_from_its_name_is_a_miss() {
        // A collision, or a file written by hand: the whole key decides, not the name.
        let directory = scratch("collision");
        let cache = ObjectCache::new(&directory);
        let (key, impostor) = (ObjectKey::new("b", b"ir one"), ObjectKey::new("b", b"ir two"));
        cache.store(&impostor, b"wrong code");
        std::fs::rename(directory.join(&impostor.file_name), directory.join(&key.file_name)).unwrap();
        assert_eq!(cache.lookup(&key), None);
        std::fs::write(directory.join(&key.file_name), b"quasi-obj-1\n\xff\xff").unwrap();
        assert_eq!(cache.lookup(&key), None, "a truncated entry is a miss");
        std::fs::remove_dir_all(&directory).unwrap();
    }

    #[test]
    fn a_folder_others_may_write_to_is_not_used() {
        let directory = scratch("shared");
        std::fs::create_dir_all(&directory).unwrap();
        std::fs::set_permissions(&directory, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
        let cache = ObjectCache::new(&directory);
        let key = ObjectKey::new("b", b"ir");
        cache.store(&key, b"code");
        assert_eq!(cache.lookup(&key), None);
        assert_eq!(cache.usage().unwrap().0, 0, "nothing was written");
        let problems = cache.take_problems();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].ends_with("is not used: others may write to it"), "{problems:?}");
        std::fs::remove_dir_all(&directory).unwrap();
    }

    #[test]
    fn pruning_removes_the_least_recently_used_first() {
        let directory = scratch("prune");
        let cache = ObjectCache::new(&directory);
        let keys: Vec<ObjectKey> = (0..3).map(|index| ObjectKey::new("b", format!("ir {index}").as_bytes())).collect();
        for (index, key) in keys.iter().enumerate() {
            cache.store(key, &[index as u8; 100]);
            // Modification times far enough apart to order them.
            let file = File::options().write(true).open(directory.join(&key.file_name)).unwrap();
            file.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(1000 + index as u64)).unwrap();
        }
        // Using the oldest makes it the newest.
        assert!(cache.lookup(&keys[0]).is_some());
        let (_, total) = cache.usage().unwrap();
        let entry = total / 3;
        assert_eq!(cache.prune(2 * entry).unwrap(), (1, entry));
        assert!(cache.lookup(&keys[1]).is_none(), "the least recently used went");
        assert!(cache.lookup(&keys[0]).is_some() && cache.lookup(&keys[2]).is_some());
        assert_eq!(cache.clear().unwrap(), (2, 2 * entry));
        assert_eq!(cache.usage().unwrap(), (0, 0));
        std::fs::remove_dir_all(&directory).unwrap();
    }
}
