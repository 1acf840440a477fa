package zksut

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"

	"github.com/metastore/metastore/bench/internal/procs"
)

// DebianPackage is the Debian package that ships the ZooKeeper server (its
// jars come with its dependency libzookeeper-java, Java with default-jre).
const DebianPackage = "zookeeper"

const (
	// ServerJar is the ZooKeeper jar of Debian's libzookeeper-java; its
	// manifest's Class-Path names the jars it depends on.
	ServerJar = "/usr/share/java/zookeeper.jar"
	// loggingJar is the SLF4J binding that sends the server's log to its
	// standard error (Debian's libslf4j-java, a dependency of
	// libzookeeper-java); without it the server logs nothing.
	loggingJar = "/usr/share/java/slf4j-simple.jar"
	// mainClass runs a member of a replicated ensemble.
	mainClass = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
)

// Runtime is what runs a ZooKeeper server: a Java launcher and the class
// path holding the server.
type Runtime struct {
	Java      string
	Classpath string
}

// Find locates the Java launcher and ServerJar. When either is missing the
// error is a *procs.NotInstalledError naming DebianPackage, which brings
// both.
func Find() (Runtime, error) {
	if _, err := os.Stat(ServerJar); err != nil {
		return Runtime{}, fmt.Errorf("zksut: %w", &procs.NotInstalledError{What: "ZooKeeper server jar (" + ServerJar + ")", Package: DebianPackage})
	}
	java, err := exec.LookPath("java")
	if err != nil {
		return Runtime{}, fmt.Errorf("zksut: %w", &procs.NotInstalledError{What: "java (the Java runtime ZooKeeper runs on)", Package: DebianPackage})
	}
	cp := ServerJar
	if _, err := os.Stat(loggingJar); err == nil {
		cp += ":" + loggingJar
	}
	return Runtime{Java: java, Classpath: cp}, nil
}

// Install installs DebianPackage with apt-get (as root) and stops the
// ZooKeeper service or server process the installation may have started.
func Install(ctx context.Context) error {
	return procs.Install(ctx, procs.Package{
		Name:     DebianPackage,
		Service:  "zookeeper.service",
		IsServer: func(cmd []string) bool { return slices.Contains(cmd, mainClass) },
	})
}
