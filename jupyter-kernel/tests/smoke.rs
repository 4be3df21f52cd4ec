//! Smoke test over real sockets: the kernel binary answers kernel_info and runs a cell, with
//! busy and idle around it. The full protocol suite is Python's (tests/jupyter, run by
//! scripts/test.sh); this keeps `cargo test` honest about the socket layer on its own.

mod client;

use client::{Kernel, TIMEOUT};
use jupyter_protocol::{ExecuteRequest, JupyterMessageContent, KernelInfoRequest, MediaType};

#[test]
fn kernel_info_and_a_cell_over_sockets() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    // The timeout is made inside the runtime: tokio timers need its context.
    runtime.block_on(async {
        tokio::time::timeout(TIMEOUT, async {
            let mut kernel = Kernel::start(env!("CARGO_BIN_EXE_quasi-kernel")).await?;

            let msg_id = kernel.send(KernelInfoRequest {}).await?;
            let JupyterMessageContent::KernelInfoReply(info) = kernel.reply_to(&msg_id).await?.content else {
                anyhow::bail!("not a kernel_info_reply")
            };
            assert_eq!(info.language_info.name, "c-lisp");
            assert_eq!(info.protocol_version, "5.3");

            let msg_id = kernel
                .send(ExecuteRequest::new("(define ((sq int) (x int)) (ret (mul x x)))\n(call sq 7)".to_string()))
                .await?;
            let reply = kernel.reply_to(&msg_id).await?;
            assert!(matches!(reply.content, JupyterMessageContent::ExecuteReply(_)));
            let published = kernel.idle_after(&msg_id).await?;
            let kinds: Vec<&str> = published.iter().map(|message| message.header.msg_type.as_str()).collect();
            assert_eq!(kinds, ["status", "execute_input", "display_data", "execute_result"]);
            let Some(JupyterMessageContent::ExecuteResult(result)) = published.last().map(|message| &message.content)
            else {
                anyhow::bail!("no result")
            };
            assert!(result.data.content.contains(&MediaType::Plain("49 : int".to_string())));
            Ok(())
        })
        .await
    })?
}

/// `--version` and `--help` answer on stdout and succeed, as `quasi`'s do; anything else is the
/// usage on stderr and status 2.
#[test]
fn version_and_help() {
    let run = |argument: &str| {
        let output =
            std::process::Command::new(env!("CARGO_BIN_EXE_quasi-kernel")).arg(argument).output().expect("runs");
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (status, stdout, _) = run("--version");
    assert_eq!((status, stdout.as_str()), (Some(0), concat!("quasi-kernel ", env!("CARGO_PKG_VERSION"), "\n")));
    let (status, stdout, _) = run("--help");
    assert_eq!(status, Some(0));
    assert!(stdout.contains("quasi-kernel --version") && stdout.contains("quasi-kernel install"), "{stdout}");
    let (status, stdout, stderr) = run("--frobnicate");
    assert_eq!((status, stdout.as_str()), (Some(2), ""));
    assert!(stderr.starts_with("usage: quasi-kernel"), "{stderr}");
}
