package main

// The image has no CA bundle (tools/image): the Mozilla roots are compiled
// in, and crypto/x509 uses them only where the system provides none, so a
// host's or a mounted /etc/ssl/certs still wins.
import _ "golang.org/x/crypto/x509roots/fallback"
