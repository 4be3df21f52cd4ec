//! Install: writes the `quasi` kernelspec (kernel.json and logos) where Jupyter looks for it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use jupyter_protocol::JupyterKernelspec;

/// The kernelspec's directory name: `jupyter console --kernel quasi`.
pub const KERNEL_NAME: &str = "quasi";

const LOGO_32: &[u8] = include_bytes!("../assets/logo-32x32.png");
const LOGO_64: &[u8] = include_bytes!("../assets/logo-64x64.png");

pub const USAGE: &str = "usage: quasi-kernel install [--user | --sys-prefix | --prefix DIR]
  --user        JUPYTER_DATA_DIR or the user's Jupyter data directory (the default)
  --sys-prefix  the active virtual environment (VIRTUAL_ENV, CONDA_PREFIX or python3's sys.prefix)
  --prefix DIR  DIR/share/jupyter";

/// Where the kernelspec goes.
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
}
