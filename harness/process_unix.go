//go:build unix

package harness

import (
	"os/exec"
	"syscall"
)

// setProcessGroup puts the environment's process in its own process group,
// so stopping it also stops the SDK worker a boot program starts as its
// child.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// terminate asks the process group to exit.
func terminate(cmd *exec.Cmd) {
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
}

// kill ends the process group.
func kill(cmd *exec.Cmd) {
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}
