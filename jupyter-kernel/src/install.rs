//! Install: writes the `quasi` kernelspec (kernel.json and logos) and the prebuilt JupyterLab
//! extension `quasi-jupyterlab` (C-Lisp highlighting, `crate::labextension`) where Jupyter looks
//! for them. With `--gpu MODE` the kernelspec is another one beside `quasi`, `quasi-MODE`, whose
//! kernel.json sets `QUASI_GPU=MODE` (the session reads it at start), so a notebook front end
//! offers both kernels, e.g. "Quasi" and "Quasi (GPU simulator)".

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

pub const USAGE: &str = "usage: quasi-kernel install [--user | --sys-prefix | --prefix DIR] [--gpu MODE]
  --user        JUPYTER_DATA_DIR or the user's Jupyter data directory (the default)
  --sys-prefix  the active virtual environment (VIRTUAL_ENV, CONDA_PREFIX or python3's sys.prefix)
  --prefix DIR  DIR/share/jupyter
  --gpu MODE    install the kernel `quasi-MODE` beside `quasi`, whose launches run as QUASI_GPU=MODE:
                sim (\"Quasi (GPU simulator)\"), sim-unchecked or device";

/// Which Jupyter data directory the kernelspec and the extension go to.
#[derive(Debug, PartialEq, Eq)]
enum Target {
    User,
    SysPrefix,
    Prefix(PathBuf),
}

/// What `--gpu MODE` installs: the value of `QUASI_GPU`, the kernelspec's name and display name.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
struct GpuMode {
    value: &'static str,
    display_name: &'static str,
}

const GPU_MODES: [GpuMode; 3] = [
    GpuMode { value: "sim", display_name: "Quasi (GPU simulator)" },
    GpuMode { value: "sim-unchecked", display_name: "Quasi (GPU simulator, unchecked)" },
    GpuMode { value: "device", display_name: "Quasi (CUDA device)" },
];

#[derive(Debug, PartialEq, Eq)]
struct Options {
    target: Target,
    gpu: Option<GpuMode>,
}

fn parse(args: &[String]) -> anyhow::Result<Options> {
    let mut target = None;
    let mut gpu = None;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => (flag, Some(value.to_string())),
            _ => (arg.as_str(), None),
        };
        let mut value = || inline.clone().or_else(|| args.next().cloned());
        match flag {
            "--user" if inline.is_none() && target.is_none() => target = Some(Target::User),
            "--sys-prefix" if inline.is_none() && target.is_none() => target = Some(Target::SysPrefix),
            "--prefix" if target.is_none() => match value() {
                Some(prefix) => target = Some(Target::Prefix(PathBuf::from(prefix))),
                None => anyhow::bail!("{USAGE}"),
            },
            "--gpu" if gpu.is_none() => match value() {
                Some(mode) => match GPU_MODES.iter().find(|known| known.value == mode) {
                    Some(known) => gpu = Some(*known),
                    None => anyhow::bail!("--gpu is `{mode}`; it may be `sim`, `sim-unchecked` or `device`"),
                },
                None => anyhow::bail!("{USAGE}"),
            },
            _ => anyhow::bail!("{USAGE}"),
        }
    }
    Ok(Options { target: target.unwrap_or(Target::User), gpu })
}

/// The kernelspec's directory name: `quasi`, or `quasi-MODE` for `--gpu MODE`.
fn kernel_name(gpu: Option<GpuMode>) -> String {
    match gpu {
        None => KERNEL_NAME.to_string(),
        Some(mode) => format!("{KERNEL_NAME}-{}", mode.value),
    }
}

/// `quasi-kernel install …`
pub fn run(args: &[String]) -> anyhow::Result<()> {
    let options = parse(args)?;
    let data_dir = match options.target {
        Target::User => match std::env::var_os("JUPYTER_DATA_DIR") {
            Some(dir) => PathBuf::from(dir),
            None => jupyter_zmq_client::user_data_dir().context("finding the user's Jupyter data directory")?,
        },
        Target::SysPrefix => sys_prefix()?.join("share").join("jupyter"),
        Target::Prefix(prefix) => prefix.join("share").join("jupyter"),
    };
    let name = kernel_name(options.gpu);
    let directory = data_dir.join("kernels").join(&name);
    let executable = std::env::current_exe().context("finding this executable")?;
    write_kernelspec(&directory, &kernelspec(&executable, options.gpu))?;
    println!("installed the kernelspec `{name}` in {}", directory.display());
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
fn kernelspec(executable: &Path, gpu: Option<GpuMode>) -> JupyterKernelspec {
    let mut env = HashMap::new();
    if let Some(mode) = gpu {
        env.insert("QUASI_GPU".to_string(), mode.value.to_string());
    }
    JupyterKernelspec {
        argv: vec![executable.display().to_string(), "--connection-file".to_string(), "{connection_file}".to_string()],
        display_name: gpu.map_or("Quasi", |mode| mode.display_name).to_string(),
        language: "c-lisp".to_string(),
        // Present and empty rather than null: jupyter_client reads these as dicts.
        metadata: Some(HashMap::new()),
        // Interrupts come as interrupt_request on control, not as SIGINT.
        interrupt_mode: Some("message".to_string()),
        env: Some(env),
    }
}

fn write_kernelspec(directory: &Path, spec: &JupyterKernelspec) -> anyhow::Result<()> {
    std::fs::create_dir_all(directory).with_context(|| format!("creating {}", directory.display()))?;
    let json = serde_json::to_string_pretty(spec)?;
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
    use super::{parse, Options, Target, GPU_MODES};
    use expect_test::expect;
    use std::path::{Path, PathBuf};

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|arg| arg.to_string()).collect()
    }

    #[test]
    fn flags() {
        let target = |list: &[&str]| parse(&args(list)).ok().map(|options| options.target);
        assert_eq!(target(&[]), Some(Target::User));
        assert_eq!(target(&["--sys-prefix"]), Some(Target::SysPrefix));
        assert_eq!(target(&["--prefix", "/opt/x"]), Some(Target::Prefix(PathBuf::from("/opt/x"))));
        assert_eq!(target(&["--prefix=/opt/x"]), Some(Target::Prefix(PathBuf::from("/opt/x"))));
        assert!(parse(&args(&["--prefix"])).is_err());
        assert!(parse(&args(&["--user", "--sys-prefix"])).is_err());
        assert!(parse(&args(&["--user=x"])).is_err());
        assert!(parse(&args(&["install"])).is_err());
    }

    #[test]
    fn gpu_flag() {
        let gpu = |list: &[&str]| parse(&args(list)).map(|options| options.gpu.map(|mode| mode.value));
        assert_eq!(gpu(&[]).ok(), Some(None));
        assert_eq!(gpu(&["--gpu", "sim"]).ok(), Some(Some("sim")));
        assert_eq!(gpu(&["--gpu=sim-unchecked"]).ok(), Some(Some("sim-unchecked")));
        assert_eq!(
            parse(&args(&["--prefix", "/p", "--gpu", "device"])).ok(),
            Some(Options { target: Target::Prefix(PathBuf::from("/p")), gpu: Some(GPU_MODES[2]) })
        );
        assert_eq!(parse(&args(&["--gpu", "sim", "--user"])).ok().map(|options| options.target), Some(Target::User));
        assert!(gpu(&["--gpu"]).is_err());
        assert!(gpu(&["--gpu", "sim", "--gpu", "device"]).is_err());
        let unknown = gpu(&["--gpu", "cuda"]).err().map(|error| error.to_string()).unwrap_or_default();
        assert_eq!(unknown, "--gpu is `cuda`; it may be `sim`, `sim-unchecked` or `device`");
        let names: Vec<String> =
            [None, Some(GPU_MODES[0]), Some(GPU_MODES[1])].into_iter().map(super::kernel_name).collect();
        assert_eq!(names, ["quasi", "quasi-sim", "quasi-sim-unchecked"]);
    }

    #[test]
    fn kernel_json() {
        let json = serde_json::to_string_pretty(&super::kernelspec(Path::new("/opt/quasi/bin/quasi-kernel"), None))
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

    #[test]
    fn kernel_json_of_the_simulator() {
        let spec = super::kernelspec(Path::new("/opt/quasi/bin/quasi-kernel"), Some(GPU_MODES[0]));
        let json = serde_json::to_string_pretty(&spec).unwrap_or_default();
        expect![[r#"
            {
              "argv": [
                "/opt/quasi/bin/quasi-kernel",
                "--connection-file",
                "{connection_file}"
              ],
              "display_name": "Quasi (GPU simulator)",
              "language": "c-lisp",
              "metadata": {},
              "interrupt_mode": "message",
              "env": {
                "QUASI_GPU": "sim"
              }
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
