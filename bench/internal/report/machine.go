package report

import (
	"bufio"
	"os"
	"runtime"
	"strings"
)

// DetectMachine describes the host: CPU model (from /proc/cpuinfo), cores,
// kernel release, Go version. What cannot be read is left empty.
func DetectMachine() Machine {
	m := Machine{
		Cores:     runtime.NumCPU(),
		GoVersion: runtime.Version(),
		OS:        runtime.GOOS,
		Arch:      runtime.GOARCH,
		CPUModel:  cpuModel("/proc/cpuinfo"),
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// cpuModel returns the first "model name" of a cpuinfo file.
func cpuModel(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(key) == "model name" {
			return strings.TrimSpace(value)
		}
	}
	return ""
}
