//! Install: writes the `quasi` kernelspec (kernel.json and logos) and the prebuilt JupyterLab
//! extension `quasi-jupyterlab` (C-Lisp highlighting, `crate::labextension`) where Jupyter looks
//! for them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use jupyter_protocol::JupyterKernelspec;

/// The kernelspec's directory name: `jupyter console --kernel quasi`.
pub const KERNEL_NAME: &str = "quasi";

/// The JupyterLab extension's directory name under `labextensions/`: its npm package's name.
const LABEXTENSION_NAME: &str = "quasi-jupyterlab";

const LOGO_32: &[u8] = include_bytes!("../assets/logo-32x32.png");
const LOGO_64: &[u8] = include_bytes!("../assets/logo-64x64.png");

pub const USAGE: &str = "usage: quasi-kernel install [--user | --sys-prefix | --prefix DIR]
  --user        JUPYTER_DATA_DIR or the user's Jupyter data directory (the default)
  --sys-prefix  the active virtual environment (VIRTUAL_ENV, CONDA_PREFIX or python3's sys.prefix)
  --prefix DIR  DIR/share/jupyter";

/// Which Jupyter data directory the kernelspec and the extension go to.
#[derive(Debug, PartialEq, Eq)]
enum Target {
    User,
    SysPrefix,
    Prefix(PathBuf),
}

fn parse(args: &[String]) -> anyhow::Result<Target> {
    match args {
        [] => Ok(Target::User),
        [flag] if flag == "--user" => Ok(Target::User),
        [flag] if flag == "--sys-prefix" => Ok(Target::SysPrefix),
        [flag, prefix] if flag == "--prefix" => Ok(Target::Prefix(PathBuf::from(prefix))),
        [flag] if flag.starts_with("--prefix=") => Ok(Target::Prefix(PathBuf::from(&flag["--prefix=".len()..]))),
        _ => anyhow::bail!("{USAGE}"),
    }
}

/// `quasi-kernel install …`
pub fn run(args: &[String]) -> anyhow::Result<()> {
    let data_dir = match parse(args)? {
        Target::User => match std::env::var_os("JUPYTER_DATA_DIR") {
            Some(dir) => PathBuf::from(dir),
            None => jupyter_zmq_client::user_data_dir().context("finding the user's Jupyter data directory")?,
        },
        Target::SysPrefix => sys_prefix()?.join("share").join("jupyter"),
        Target::Prefix(prefix) => prefix.join("share").join("jupyter"),
    };
    let directory = data_dir.join("kernels").join(KERNEL_NAME);
    let executable = std::env::current_exe().context("finding this executable")?;
    write_kernelspec(&directory, &executable)?;
    println!("installed the Quasi kernelspec in {}", directory.display());
    let extension = data_dir.join("labextensions").join(LABEXTENSION_NAME);
    write_labextension(&extension)?;
    println!("installed the JupyterLab extension {LABEXTENSION_NAME} (C-Lisp highlighting) in {}", extension.display());
    Ok(())
}

/// The prefix `jupyter` itself would use for `--sys-prefix`.
fn sys_prefix() -> anyhow::Result<PathBuf> {
    for variable in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(prefix) = std::env::var_os(variable).filter(|prefix| !prefix.is_empty()) {
            return Ok(PathBuf::from(prefix));
        }
    }
    let output = std::process::Command::new("python3")
        .args(["-c", "import sys; print(sys.prefix)"])
        .output()
        .context("running python3 to find sys.prefix")?;
    anyhow::ensure!(output.status.success(), "python3 could not tell its sys.prefix");
    Ok(PathBuf::from(String::from_utf8_lossy(&output.stdout).trim()))
}

/// The kernel.json contents.
fn kernelspec(executable: &Path) -> JupyterKernelspec {
    JupyterKernelspec {
        argv: vec![executable.display().to_string(), "--connection-file".to_string(), "{connection_file}".to_string()],
        display_name: "Quasi".to_string(),
        language: "c-lisp".to_string(),
        // Present and empty rather than null: jupyter_client reads these as dicts.
        metadata: Some(HashMap::new()),
        // Interrupts come as interrupt_request on control, not as SIGINT.
        interrupt_mode: Some("message".to_string()),
        env: Some(HashMap::new()),
    }
}

fn write_kernelspec(directory: &Path, executable: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(directory).with_context(|| format!("creating {}", directory.display()))?;
    let json = serde_json::to_string_pretty(&kernelspec(executable))?;
    std::fs::write(directory.join("kernel.json"), json + "\n")
        .with_context(|| format!("writing {}/kernel.json", directory.display()))?;
    std::fs::write(directory.join("logo-32x32.png"), LOGO_32)?;
    std::fs::write(directory.join("logo-64x64.png"), LOGO_64)?;
    Ok(())
}

/// Writes the prebuilt extension, replacing an earlier one: its files have other content hashes
/// in their names, and a stale `remoteEntry` left beside the new one would only confuse.
fn write_labextension(directory: &Path) -> anyhow::Result<()> {
    match std::fs::remove_dir_all(directory) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
            return Err(error).with_context(|| format!("removing the earlier {}", directory.display()));
        }
        _ => {}
    }
    for (path, bytes) in crate::labextension::FILES {
        let file = directory.join(path);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&file, bytes).with_context(|| format!("writing {}", file.display()))?;
    }
    // What `jupyter labextension list` and the extension manager say installed it.
    let install = serde_json::json!({
        "packageManager": "quasi-kernel",
        "packageName": "quasi-kernel",
        "uninstallInstructions": format!("Delete {}", directory.display()),
    });
    let file = directory.join("install.json");
    std::fs::write(&file, serde_json::to_string_pretty(&install)? + "\n")
        .with_context(|| format!("writing {}", file.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{parse, Target};
    use expect_test::expect;
    use std::path::{Path, PathBuf};

    #[test]
    fn flags() {
        let args = |list: &[&str]| list.iter().map(|arg| arg.to_string()).collect::<Vec<_>>();
        assert_eq!(parse(&args(&[])).ok(), Some(Target::User));
        assert_eq!(parse(&args(&["--sys-prefix"])).ok(), Some(Target::SysPrefix));
        assert_eq!(parse(&args(&["--prefix", "/opt/x"])).ok(), Some(Target::Prefix(PathBuf::from("/opt/x"))));
        assert!(parse(&args(&["--prefix"])).is_err());
        assert!(parse(&args(&["--user", "--sys-prefix"])).is_err());
    }

    #[test]
    fn kernel_json() {
        let json = serde_json::to_string_pretty(&super::kernelspec(Path::new("/opt/quasi/bin/quasi-kernel")))
            .unwrap_or_default();
        expect![[r#"
            {
              "argv": [
                "/opt/quasi/bin/quasi-kernel",
                "--connection-file",
                "{connection_file}"
              ],
              "display_name": "Quasi",
              "language": "c-lisp",
              "metadata": {},
              "interrupt_mode": "message",
              "env": {}
            }"#]]
        .assert_eq(&json);
    }

    /// The embedded list is what scripts/build-labextension.sh last built, file for file.
    #[test]
    fn labextension_files_match_the_prebuilt_folder() {
        let prebuilt = Path::new(env!("CARGO_MANIFEST_DIR")).join("labextension/quasi_jupyterlab/labextension");
        let mut on_disk = Vec::new();
        let mut folders = vec![prebuilt.clone()];
        while let Some(folder) = folders.pop() {
            for entry in std::fs::read_dir(&folder).expect("reading the built extension").flatten() {
                let path = entry.path();
                if path.is_dir() {
                    folders.push(path);
                } else if let Ok(relative) = path.strip_prefix(&prebuilt) {
                    on_disk.push(relative.to_string_lossy().into_owned());
                }
            }
        }
        on_disk.sort();
        let embedded: Vec<String> = crate::labextension::FILES.iter().map(|(path, _)| path.to_string()).collect();
        assert_eq!(embedded, on_disk, "run scripts/build-labextension.sh to list the prebuilt files again");
    }

    #[test]
    fn install_writes_the_labextension() {
        let directory = tempfile::tempdir().expect("a temporary directory");
        let extension = directory.path().join("labextensions").join(super::LABEXTENSION_NAME);
        let stale = extension.join("static/remoteEntry.0000.js");
        std::fs::create_dir_all(stale.parent().unwrap_or(&extension)).expect("creating a stale install");
        std::fs::write(&stale, "stale").expect("writing a stale file");

        super::write_labextension(&extension).expect("writing the extension");
        let package: serde_json::Value =
            serde_json::from_slice(&std::fs::read(extension.join("package.json")).expect("package.json"))
                .expect("package.json is JSON");
        assert_eq!(package["name"], "quasi-jupyterlab");
        // JupyterLab loads the extension from the remoteEntry that package.json names.
        let entry = package["jupyterlab"]["_build"]["load"].as_str().unwrap_or_default();
        assert!(entry.starts_with("static/remoteEntry."), "{entry}");
        assert!(extension.join(entry).is_file(), "{entry} is written");
        assert!(extension.join("install.json").is_file());
        assert!(!stale.exists(), "an earlier install's files are removed");
    }
}
