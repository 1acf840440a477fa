package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/metastore/metastore/api"
	"github.com/metastore/metastore/config"
)

// authTokens reads the bootstrap and join token files of cfg ("" for a
// file not configured). Errors name the file and the problem, never the
// content.
func authTokens(cfg config.Config) (bootstrap, join string, err error) {
	if bootstrap, err = readTokenFile("auth-bootstrap-token-file", cfg.AuthBootstrapTokenFile); err != nil {
		return "", "", err
	}
	if join, err = readTokenFile("auth-join-token-file", cfg.AuthJoinTokenFile); err != nil {
		return "", "", err
	}
	return bootstrap, join, nil
}

func readTokenFile(setting, path string) (string, error) {
	if path == "" {
		return "", nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--%s: %w", setting, err)
	}
	tok := strings.TrimSpace(string(raw))
	if err := api.CheckTokenFormat(tok); err != nil {
		return "", fmt.Errorf("--%s %s: %w", setting, path, err)
	}
	return tok, nil
}
