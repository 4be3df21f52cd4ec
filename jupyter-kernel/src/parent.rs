//! Parent: a kernel started by a Jupyter client exits when that client dies
//! (`JPY_PARENT_PID`), so no orphaned kernel keeps its session, ports and memory.

use std::time::Duration;

use tokio::sync::mpsc;

use crate::logging::warning;

/// How often the parent is looked at: cheap (one read of /proc), and soon enough.
const POLL: Duration = Duration::from_millis(500);

/// Watches the process `JPY_PARENT_PID` names, if any, and sends exit status 1 when it is gone.
pub fn watch(exit: mpsc::UnboundedSender<i32>) {
    let Some(parent) =
        std::env::var("JPY_PARENT_PID").ok().and_then(|pid| pid.trim().parse::<u32>().ok()).filter(|pid| *pid > 1)
    else {
        return;
    };
    // If it is our direct parent, our parent process id changes the moment it dies (we are
    // re-parented), even while it is an unreaped zombie; otherwise /proc says.
    let direct = std::os::unix::process::parent_id() == parent;
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(POLL);
        loop {
            ticks.tick().await;
            let alive = if direct { std::os::unix::process::parent_id() == parent } else { process_alive(parent) };
            if !alive {
                warning!("the parent process {parent} is gone; exiting");
                let _ = exit.send(1);
                return;
            }
        }
    });
}

/// Whether a process exists and is not a zombie, from /proc/PID/stat (Linux).
fn process_alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    // The state follows the command name, which is in parentheses and may contain spaces.
    let state = stat.rfind(')').and_then(|end| stat[end + 1..].split_whitespace().next());
    !matches!(state, Some("Z" | "X") | None)
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_process_is_alive_and_a_nonexistent_one_is_not() {
        assert!(super::process_alive(std::process::id()));
        // Linux pids stop well below 2^22 (pid_max); this one cannot exist.
        assert!(!super::process_alive(u32::MAX - 1));
    }
}
