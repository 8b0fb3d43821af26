// Command capshim is an OCI runtime wrapper for test machines whose capability bounding set
// lacks CAP_SYS_RESOURCE (a sandbox's container, for instance). runc refuses to start a
// container whose spec asks for a capability the runtime itself does not hold, so
// `docker run --privileged` — how kind starts its nodes — fails there with "unable to apply
// caps: operation not permitted". capshim drops exactly the capabilities missing from its own
// bounding set from the spec runc is about to read, then execs runc:
//
//   - `runc create|run --bundle DIR`: DIR/config.json, key process.capabilities;
//   - `runc exec --process FILE`: FILE, key capabilities (how `docker exec --privileged` runs).
//
// hack/images/docker-up.sh registers it with `dockerd --add-runtime` only when it detects such a
// machine; elsewhere it is never built or used. It needs only the standard library and is built
// with `go build` of this single file.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// capNames maps capability numbers to the names the OCI spec uses (linux/capability.h).
var capNames = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID",
	"CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE",
	"CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK",
	"CAP_IPC_OWNER", "CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE",
	"CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE", "CAP_SYS_RESOURCE",
	"CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE", "CAP_AUDIT_WRITE",
	"CAP_AUDIT_CONTROL", "CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG",
	"CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF",
	"CAP_CHECKPOINT_RESTORE",
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "capshim:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	runc, err := realRunc()
	if err != nil {
		return err
	}
	missing, err := missingCaps()
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		if file, key := specFile(args); file != "" {
			if err := dropCaps(file, key, missing); err != nil {
				return err
			}
		}
	}
	return syscall.Exec(runc, append([]string{runc}, args...), os.Environ())
}

// realRunc is $CAPSHIM_RUNC, or the first runc on PATH that is not this program.
func realRunc() (string, error) {
	if p := os.Getenv("CAPSHIM_RUNC"); p != "" {
		return p, nil
	}
	self, _ := os.Executable()
	for _, dir := range filepath.SplitList(os.Getenv("PATH") + ":/usr/sbin:/usr/bin:/usr/local/sbin") {
		p := filepath.Join(dir, "runc")
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 && p != self {
			return p, nil
		}
	}
	return exec.LookPath("runc")
}

// missingCaps lists the capabilities below the kernel's last one that this process's bounding
// set lacks.
func missingCaps() (map[string]bool, error) {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return nil, err
	}
	var bnd uint64
	found := false
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			if bnd, err = strconv.ParseUint(strings.TrimSpace(v), 16, 64); err != nil {
				return nil, fmt.Errorf("parse CapBnd %q: %w", v, err)
			}
			found = true
		}
	}
	if !found {
		return nil, fmt.Errorf("no CapBnd in /proc/self/status")
	}
	last := len(capNames) - 1
	if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n < last {
			last = n
		}
	}
	missing := map[string]bool{}
	for i := 0; i <= last; i++ {
		if bnd&(1<<uint(i)) == 0 {
			missing[capNames[i]] = true
		}
	}
	return missing, nil
}

// specFile finds the JSON file runc will read and where the capabilities sit in it.
func specFile(args []string) (file string, key []string) {
	sub := ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		if sub == "" {
			switch {
			case a == "--root" || a == "--log" || a == "--log-format" || a == "--criu" || a == "--rootless":
				i++ // global flag with a value
			case !strings.HasPrefix(a, "-"):
				sub = a
			}
			continue
		}
		name, val, hasVal := strings.Cut(a, "=")
		if !hasVal && i+1 < len(args) {
			val = args[i+1]
		}
		switch {
		case (sub == "create" || sub == "run") && (name == "--bundle" || name == "-b"):
			return filepath.Join(val, "config.json"), []string{"process", "capabilities"}
		case sub == "exec" && (name == "--process" || name == "-p"):
			return val, []string{"capabilities"}
		}
	}
	if sub == "create" || sub == "run" { // runc's default bundle is the working directory
		return "config.json", []string{"process", "capabilities"}
	}
	return "", nil
}

// dropCaps removes the missing capabilities from every set under key in file, in place.
func dropCaps(file string, key []string, missing map[string]bool) error {
	st, err := os.Stat(file)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	node := doc
	for _, k := range key {
		next, ok := node[k].(map[string]any)
		if !ok {
			return nil // no capabilities: nothing to drop
		}
		node = next
	}
	changed := false
	for set, v := range node {
		list, ok := v.([]any)
		if !ok {
			continue
		}
		kept := make([]any, 0, len(list))
		for _, c := range list {
			if s, ok := c.(string); ok && missing[s] {
				changed = true
				continue
			}
			kept = append(kept, c)
		}
		node[set] = kept
	}
	if !changed {
		return nil
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	return os.WriteFile(file, out, st.Mode().Perm())
}
