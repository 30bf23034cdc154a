package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// progress draws a progress bar on stderr: redrawn in place on a terminal,
// one line per tenth of the run otherwise (CI logs).
type progress struct {
	w        io.Writer
	tty      bool
	total    time.Duration // planned time of every cell
	doneTime time.Duration
	cells    int
	started  time.Time
	lastStep int
}

func newProgress(w io.Writer, total time.Duration) *progress {
	tty := false
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	p := &progress{w: w, tty: tty, total: max(total, 1), started: time.Now(), lastStep: -1}
	fmt.Fprintf(w, "compare: %s of measurement planned\n", total.Round(time.Second))
	return p
}

func (p *progress) fraction() float64 { return min(float64(p.doneTime)/float64(p.total), 1) }

// show says which cell runs now.
func (p *progress) show(c cell) {
	what := fmt.Sprintf("%s %s %s", c.kind, c.spec.System, c.spec.Payload)
	if c.kind == kindOpen {
		what += fmt.Sprintf(" %d%%", c.load)
	} else {
		what += fmt.Sprintf(" c=%d", c.spec.Callers)
	}
	if p.tty {
		p.draw(what)
	}
}

func (p *progress) done(c cell) {
	p.doneTime += c.cost()
	p.cells++
	if !p.tty {
		if step := int(p.fraction() * 10); step > p.lastStep {
			p.lastStep = step
			p.draw(fmt.Sprintf("%d cells", p.cells))
			fmt.Fprintln(p.w)
		}
	}
}

func (p *progress) draw(what string) {
	const width = 30
	f := p.fraction()
	n := int(f * width)
	eta := ""
	if f > 0.02 {
		left := time.Duration(float64(time.Since(p.started)) * (1 - f) / f)
		eta = " ETA " + left.Round(time.Second).String()
	}
	line := fmt.Sprintf("[%s%s] %3.0f%%%s %s", strings.Repeat("#", n), strings.Repeat(".", width-n), f*100, eta, what)
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", line)
	} else {
		fmt.Fprint(p.w, line)
	}
}

func (p *progress) finish() {
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K")
	}
	fmt.Fprintf(p.w, "compare: %d cells measured in %s\n", p.cells, time.Since(p.started).Round(time.Second))
}
