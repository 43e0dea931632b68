package output

import (
	"io"
	"strings"

	"github.com/mattn/go-runewidth"
	"github.com/pterm/pterm"
)

// Columns is a table the CLI prints, for every command that prints one:
// columns aligned as kubectl get aligns them, no borders, no trailing
// spaces.
type Columns struct {
	// Header is the first row, upper-case by convention; nil for none.
	Header []string
	// Rows are the cells, row by row.
	Rows [][]string
	// Gap is the number of spaces between columns; zero means 3, as
	// kubectl get.
	Gap int
	// HeaderStyle and CellStyle colour a cell once it is padded; nil
	// leaves it plain. Widths ignore colours.
	HeaderStyle, CellStyle func(string) string
}

// Lines renders t, one string per row.
func (t Columns) Lines() []string {
	rows := t.Rows
	if t.Header != nil {
		rows = append([][]string{t.Header}, rows...)
	}
	var widths []int
	for _, row := range rows {
		for i, cell := range row {
			if i == len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], Width(cell))
		}
	}
	gap := t.Gap
	if gap <= 0 {
		gap = 3
	}
	lines := make([]string, len(rows))
	for r, row := range rows {
		style := t.CellStyle
		if r == 0 && t.Header != nil {
			style = t.HeaderStyle
		}
		var b strings.Builder
		for i, cell := range row {
			if i > 0 {
				b.WriteString(strings.Repeat(" ", gap))
			}
			if i < len(row)-1 {
				cell += strings.Repeat(" ", widths[i]-Width(cell))
			}
			if style != nil {
				cell = style(cell)
			}
			b.WriteString(cell)
		}
		lines[r] = strings.TrimRight(b.String(), " ")
	}
	return lines
}

// Write writes t to w.
func (t Columns) Write(w io.Writer) error {
	var b strings.Builder
	for _, l := range t.Lines() {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Width is how many terminal columns s takes, colours aside.
func Width(s string) int {
	return runewidth.StringWidth(pterm.RemoveColorFromString(s))
}
