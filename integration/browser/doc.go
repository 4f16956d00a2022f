// Package browser tests the status pages (package web) in a real headless
// Chromium, driven through the DevTools protocol with chromedp. It is a module of
// its own so that the browser driver stays out of the library's go.mod: users of
// anarchon never download it.
//
//	go test -race -v ./...                                 # in integration/browser
//	ANARCHON_SCREENSHOTS=../../docs/screenshots go test -run TestStatusPageInChromium ./...
//
// The test needs Debian's chromium (/usr/bin/chromium, or $ANARCHON_CHROMIUM);
// .ci/deps installs it. It fails, never skips, when Chromium cannot start.
package browser
