// Package ucxtest is the UCX edge of the test binaries that reach UCX
// (gostore/ucx's, gostore/transfer's, gostore/client's): their TestMain
// calls Main, which opens the libucp that GOSTORE_LIBUCX names, as the
// bindings do (the packages themselves read no environment).
//
// It also refuses a binary whose UCX is not the one a run asked for:
// with GOSTORE_TEST_UCX_VERSION and/or GOSTORE_TEST_UCX_LIBRARY set (make
// test-ucx-wheel sets both to PyPI's libucx-cu12), the loaded library must
// be that version and that file, or the binary exits 2 before any test. A
// run meant for UCX 1.22 that silently loaded the system's 1.13 (or no UCX
// at all, where every UCX test would skip) therefore fails. The check is
// made once, in the parent: its children (which a test may point at
// another library on purpose) do not inherit the expectation.
//
// Only _test files import it.
package ucxtest
