package main

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestQuickstart(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), []string{"-duration", "4s", "-store", t.TempDir()}, &out), out.String())
	text := out.String()
	t.Log(text)
	lines := strings.Split(strings.TrimSpace(text), "\n")
	last := lines[len(lines)-1]
	m := regexp.MustCompile(`^quickstart: (\d+) slots, (\d+) runs, (\d+) duplicates, (\d+) missed$`).FindStringSubmatch(last)
	require.NotNil(t, m, "the last line is the summary: %q", last)
	slots, _ := strconv.Atoi(m[1])
	runs, _ := strconv.Atoi(m[2])
	assert.GreaterOrEqual(t, slots, 2)
	assert.Equal(t, slots, runs, "every slot ran once")
	assert.Equal(t, "0", m[3], "duplicates")
	assert.Equal(t, "0", m[4], "missed")
	assert.Contains(t, text, "history of \"quickstart-tick\"")
	assert.Regexp(t, `ran on instance-[abc] \(attempt 1\)`, text)
	assert.Equal(t, 1, strings.Count(text, "quickstart: "+m[1]+" slots"), "exactly one summary line")
}

func TestQuickstartFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-duration", "1s"},
		{"-url", "nats://127.0.0.1:1", "-store", "/tmp/x"},
		{"extra"},
		{"-nope"},
	} {
		var out bytes.Buffer
		assert.Error(t, run(t.Context(), args, &out), "%v", args)
	}
}
