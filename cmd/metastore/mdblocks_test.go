package main

import "strings"

// mdBlock is a code block of a Markdown file: an indented block (a run of
// lines indented by four or more spaces that follows a blank line; wrapped
// list text is indented by three) or a ``` fence.
type mdBlock struct {
	line  int      // line number of the block's first line in the file (1-based)
	fence bool     // a ``` fence, not an indented block
	info  string   // the fence's info string ("sh", "json", "go"); "" for none
	raw   []string // the lines as printed, indentation included
	text  string   // the lines with the indentation of the first one removed
}

// markdownBlocks returns the code blocks of md, in order. firstLine is the
// line number of md's first line in its file.
func markdownBlocks(md string, firstLine int) []mdBlock {
	var blocks []mdBlock
	var cur []string
	start, fenceIndent := 0, 0
	inFence := false
	info := ""
	prevBlank := true
	flush := func(fenced bool) {
		for !fenced && len(cur) > 0 && strings.TrimSpace(cur[len(cur)-1]) == "" {
			cur = cur[:len(cur)-1]
		}
		if len(cur) == 0 && !fenced {
			return
		}
		indent := fenceIndent
		if !fenced {
			indent = len(cur[0]) - len(strings.TrimLeft(cur[0], " "))
		}
		text := make([]string, len(cur))
		for k, l := range cur {
			if len(l) >= indent && strings.TrimSpace(l[:indent]) == "" {
				text[k] = l[indent:]
			} else {
				text[k] = strings.TrimLeft(l, " ")
			}
		}
		blocks = append(blocks, mdBlock{line: start, fence: fenced, info: info,
			raw: cur, text: strings.TrimRight(strings.Join(text, "\n"), "\n")})
		cur, info = nil, ""
	}
	for k, l := range strings.Split(md, "\n") {
		n := firstLine + k
		trimmed := strings.TrimSpace(l)
		if inFence {
			if strings.HasPrefix(trimmed, "```") {
				inFence = false
				flush(true)
				prevBlank = false
				continue
			}
			cur = append(cur, l)
			continue
		}
		if strings.HasPrefix(trimmed, "```") {
			flush(false)
			inFence, info = true, strings.TrimSpace(strings.TrimPrefix(trimmed, "```"))
			fenceIndent = len(l) - len(strings.TrimLeft(l, " "))
			start = n + 1
			prevBlank = false
			continue
		}
		switch indented := strings.HasPrefix(l, "    "); {
		case indented && (prevBlank || len(cur) > 0):
			if len(cur) == 0 {
				start = n
			}
			cur = append(cur, l)
		case trimmed == "" && len(cur) > 0:
			cur = append(cur, "") // a blank line inside a block, or its end
		default:
			flush(false)
		}
		prevBlank = trimmed == ""
	}
	flush(false)
	return blocks
}
