package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

func valuesCmd(args []string) error {
	fs := flag.NewFlagSet("values", flag.ContinueOnError)
	in := fs.String("in", "", "values.yaml to read")
	out := fs.String("out", "", "file to write (may be -in)")
	var sets listFlag
	fs.Var(&sets, "set", "KEY.PATH=VALUE: a string scalar that already exists in the file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := required(fs, "in", "out"); err != nil {
		return err
	}
	src, err := os.ReadFile(*in)
	if err != nil {
		return err
	}
	for _, s := range sets {
		path, value, ok := strings.Cut(s, "=")
		if !ok {
			return fmt.Errorf("-set %q: want KEY.PATH=VALUE", s)
		}
		if src, err = setScalar(src, path, value); err != nil {
			return fmt.Errorf("%s: %w", *in, err)
		}
	}
	return os.WriteFile(*out, src, 0o644)
}

// setScalar replaces the value of the scalar at the dotted path with value, double-quoted,
// on its own line of src: every other byte (comments, order, indentation) is kept. The key must
// exist and hold a one-line scalar; anything else is an error, not an addition.
func setScalar(src []byte, path, value string) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, err
	}
	if len(doc.Content) != 1 {
		return nil, fmt.Errorf("%s: not a YAML document", path)
	}
	n := doc.Content[0]
	for _, key := range strings.Split(path, ".") {
		if n.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("%s: %q is not under a mapping", path, key)
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				next = n.Content[i+1]
			}
		}
		if next == nil {
			return nil, fmt.Errorf("%s: no key %q", path, key)
		}
		n = next
	}
	if n.Kind != yaml.ScalarNode || n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
		return nil, fmt.Errorf("%s: not a one-line scalar", path)
	}
	lines := bytes.SplitAfter(src, []byte("\n"))
	line := lines[n.Line-1]
	quoted, err := json.Marshal(value)
	if err != nil {
		return nil, err
	}
	repl := append([]byte{}, line[:n.Column-1]...)
	repl = append(repl, quoted...)
	if n.LineComment != "" {
		repl = append(repl, ' ')
		repl = append(repl, n.LineComment...)
	}
	if bytes.HasSuffix(line, []byte("\n")) {
		repl = append(repl, '\n')
	}
	lines[n.Line-1] = repl
	return bytes.Join(lines, nil), nil
}
