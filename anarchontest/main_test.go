package anarchontest_test

import (
	"testing"

	"go.uber.org/goleak"
)

// A closed fleet leaves no goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
