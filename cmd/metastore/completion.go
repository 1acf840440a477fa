package main

import (
	"bytes"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
)

// Shell completion. `metastore completion bash|zsh` prints a script that
// asks the binary itself what can follow the words typed so far
// (`metastore __complete WORD... PARTIAL`, one candidate a line): command
// words from the command table, flags from each command's own -h output,
// so the completion always matches the binary. No candidate means a file
// name or a value the shell completes itself.

const bashCompletion = `# bash completion for metastore: source <(metastore completion bash)
_metastore() {
	local IFS=$'\n'
	local cur="${COMP_WORDS[COMP_CWORD]}"
	COMPREPLY=($(compgen -W "$(metastore __complete "${COMP_WORDS[@]:1:COMP_CWORD}" 2>/dev/null)" -- "$cur"))
	if [ "${#COMPREPLY[@]}" -eq 0 ]; then
		compopt -o default 2>/dev/null
	fi
}
complete -F _metastore metastore
`

const zshCompletion = `#compdef metastore
# zsh completion for metastore: put this in a directory of $fpath as
# _metastore, or: source <(metastore completion zsh) after compinit.
_metastore() {
	local -a candidates
	candidates=("${(@f)$(metastore __complete "${(@)words[2,CURRENT]}" 2>/dev/null)}")
	if (( ${#candidates} )) && [[ -n "${candidates[1]}" ]]; then
		compadd -- "${candidates[@]}"
	else
		_files
	fi
}
if [ "$funcstack[1]" = "_metastore" ]; then
	_metastore "$@"
else
	compdef _metastore metastore
fi
`

func runCompletion(inv *invocation, args []string) int {
	if len(args) != 1 {
		return inv.badUsage("want bash or zsh")
	}
	switch args[0] {
	case "bash":
		fmt.Fprint(inv.stdout, bashCompletion)
	case "zsh":
		fmt.Fprint(inv.stdout, zshCompletion)
	case "-h", "-help", "--help":
		fmt.Fprintf(inv.stdout, "Usage: metastore %s\n\nbash: source <(metastore completion bash)\nzsh:  source <(metastore completion zsh) (after compinit), or save it as _metastore in $fpath\n", inv.cmd.synopsis())
	default:
		return inv.badUsage("unknown shell %q", args[0])
	}
	return exitOK
}

// flagLine matches a flag in a command's -h output: "  -addr string" (the
// flag package) or "  --node-id" (serve's usage).
var flagLine = regexp.MustCompile(`(?m)^ {2}--?([a-z][a-z0-9-]*)`)

// commandFlags returns the flags of c, read from its -h output.
func commandFlags(c *command, getenv func(string) string) []string {
	var out bytes.Buffer
	c.run(&invocation{cmd: c, stdout: &out, stderr: io.Discard, getenv: getenv}, []string{"-h"})
	seen := map[string]bool{}
	var flags []string
	for _, m := range flagLine.FindAllStringSubmatch(out.String(), -1) {
		if f := "--" + m[1]; !seen[f] {
			seen[f] = true
			flags = append(flags, f)
		}
	}
	sort.Strings(flags)
	return flags
}

// completions returns what can follow words (the last one being the word
// under the cursor, possibly empty), filtered by that word's prefix.
func completions(words []string, getenv func(string) string) []string {
	if len(words) == 0 {
		words = []string{""}
	}
	prior, partial := words[:len(words)-1], words[len(words)-1]
	var candidates []string
	seen := map[string]bool{}
	add := func(w string) {
		if !seen[w] && strings.HasPrefix(w, partial) {
			seen[w] = true
			candidates = append(candidates, w)
		}
	}
	if len(prior) == 0 {
		for _, c := range commands {
			first, _, _ := strings.Cut(c.name, " ")
			add(first)
		}
		return candidates
	}
	// The command: one word, or a group word and a subcommand.
	var cmd *command
	var group []*command
	for _, c := range commands {
		if c.name == prior[0] {
			cmd = c
			break
		}
		if first, sub, ok := strings.Cut(c.name, " "); ok && first == prior[0] {
			group = append(group, c)
			if len(prior) > 1 && sub == prior[1] {
				cmd = c
			}
		}
	}
	switch {
	case cmd == nil && len(group) > 0 && len(prior) == 1:
		for _, c := range group {
			_, sub, _ := strings.Cut(c.name, " ")
			add(sub)
		}
		return candidates
	case cmd == nil || cmd.run == nil:
		return nil
	}
	if cmd.name == "completion" {
		if len(prior) == 1 {
			add("bash")
			add("zsh")
		}
		return candidates
	}
	if strings.HasPrefix(partial, "-") {
		for _, f := range commandFlags(cmd, getenv) {
			add(f)
		}
	}
	return candidates
}

// runComplete is the hidden `metastore __complete WORD...` the completion
// scripts call.
func runComplete(stdout io.Writer, args []string, getenv func(string) string) int {
	for _, c := range completions(args, getenv) {
		fmt.Fprintln(stdout, c)
	}
	return exitOK
}
