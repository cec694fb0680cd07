package box

import (
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/testutil"
)

// debianKeyring is the keyring of Debian's archive keys, which apt on a
// Debian host depends on and an Ubuntu host lacks unless the README's test
// command installed it.
func debianKeyring(t *testing.T, _, _ string) string {
	t.Helper()
	const keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"
	if _, err := os.Stat(keyring); err != nil {
		t.Fatalf("%s is needed to check Debian's archive: %s debian-archive-keyring)", keyring, testutil.TestCommand)
	}
	return keyring
}

// ubuntuArchiveKey is the fingerprint of the key that signs Ubuntu's
// archive, "Ubuntu Archive Automatic Signing Key (2018)", as Ubuntu
// publishes it.
const ubuntuArchiveKey = "F6ECB3762474EDA9D21B7022871920D1991BC93C"

// ubuntuKeyringDeb is where the package of Ubuntu's archive keys, the one
// debootstrap installs into an Ubuntu 24.04 root filesystem, lies in the
// archive. Noble's release pocket is frozen, so the file stays there.
const ubuntuKeyringDeb = "/pool/main/u/ubuntu-keyring/ubuntu-keyring_2023.11.28.1_all.deb"

// ubuntuKeyring writes into dir a keyring holding Ubuntu's archive key
// alone, for debootstrap to check the signature of what it downloads from
// mirror, and returns its name. Debian 12 has no ubuntu-keyring package:
// the key comes from Ubuntu's own, fetched from mirror, and is used only
// when it is one key whose fingerprint is ubuntuArchiveKey; anything else
// fails t, so the check is never skipped.
func ubuntuKeyring(t *testing.T, dir, mirror string) string {
	t.Helper()
	c := &http.Client{Timeout: 2 * time.Minute}
	resp, err := c.Get(mirror + ubuntuKeyringDeb)
	if err != nil {
		t.Fatalf("fetching Ubuntu's archive key: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("fetching Ubuntu's archive key: %s%s: %s", mirror, ubuntuKeyringDeb, resp.Status)
	}
	deb := filepath.Join(dir, "ubuntu-keyring.deb")
	f, err := os.Create(deb)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, io.LimitReader(resp.Body, 1<<20)); err != nil {
		t.Fatalf("fetching Ubuntu's archive key: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	x := filepath.Join(dir, "x")
	if out, err := exec.Command("dpkg-deb", "-x", deb, x).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb -x %s: %v\n%s", deb, err, out)
	}
	key, err := os.ReadFile(filepath.Join(x, "etc/apt/trusted.gpg.d/ubuntu-keyring-2018-archive.gpg"))
	if err != nil {
		t.Fatal(err)
	}
	fps, err := primaryKeys(key)
	if err != nil {
		t.Fatalf("Ubuntu's archive key from %s: %v", mirror, err)
	}
	if len(fps) != 1 || fps[0] != ubuntuArchiveKey {
		t.Fatalf("Ubuntu's archive key from %s has the fingerprints %q, not %s alone: not using it", mirror, fps, ubuntuArchiveKey)
	}
	keyring := filepath.Join(dir, "ubuntu-archive.gpg")
	if err := os.WriteFile(keyring, key, 0o644); err != nil {
		t.Fatal(err)
	}
	return keyring
}

// primaryKeys returns the fingerprints, in upper-case hex, of the primary
// public keys of a binary OpenPGP keyring, as gpgv reads one: a sequence
// of packets (RFC 4880, section 4.2), each key a public-key packet (tag 6)
// followed by its user ids, signatures and subkeys. Only version 4 keys
// are known here; their fingerprint is the SHA-1 of 0x99, the packet's
// two-byte length and its body (section 12.2).
func primaryKeys(b []byte) ([]string, error) {
	var fps []string
	for len(b) > 0 {
		h := b[0]
		if h&0x80 == 0 {
			return nil, errors.New("not an OpenPGP packet")
		}
		var tag, n, hdr int
		need := func(k int) error {
			if len(b) < k {
				return errors.New("truncated packet header")
			}
			return nil
		}
		if h&0x40 != 0 { // new format
			tag = int(h & 0x3f)
			if err := need(2); err != nil {
				return nil, err
			}
			switch o := int(b[1]); {
			case o < 192:
				n, hdr = o, 2
			case o < 224:
				if err := need(3); err != nil {
					return nil, err
				}
				n, hdr = (o-192)<<8+int(b[2])+192, 3
			case o == 255:
				if err := need(6); err != nil {
					return nil, err
				}
				n, hdr = int(binary.BigEndian.Uint32(b[2:6])), 6
			default:
				return nil, errors.New("a packet of partial lengths, which no key has")
			}
		} else {
			tag = int(h>>2) & 0xf
			switch h & 3 {
			case 0:
				if err := need(2); err != nil {
					return nil, err
				}
				n, hdr = int(b[1]), 2
			case 1:
				if err := need(3); err != nil {
					return nil, err
				}
				n, hdr = int(binary.BigEndian.Uint16(b[1:3])), 3
			case 2:
				if err := need(5); err != nil {
					return nil, err
				}
				n, hdr = int(binary.BigEndian.Uint32(b[1:5])), 5
			default:
				return nil, errors.New("a packet of indeterminate length, which no key has")
			}
		}
		if n < 0 || len(b)-hdr < n {
			return nil, errors.New("truncated packet")
		}
		body := b[hdr : hdr+n]
		if tag == 6 {
			if n == 0 || body[0] != 4 || n > 0xffff {
				return nil, fmt.Errorf("a public key that is not of version 4")
			}
			s := sha1.New()
			s.Write([]byte{0x99, byte(n >> 8), byte(n)})
			s.Write(body)
			fps = append(fps, strings.ToUpper(hex.EncodeToString(s.Sum(nil))))
		}
		b = b[hdr+n:]
	}
	return fps, nil
}

// TestPrimaryKeys reads the fingerprint of Debian 12's release key from
// the keyring debian-archive-keyring installs, as gpg shows it, and
// refuses what is not a keyring.
func TestPrimaryKeys(t *testing.T) {
	const file = "/usr/share/keyrings/debian-archive-bookworm-stable.gpg"
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (the package debian-archive-keyring installs it)", err)
	}
	fps, err := primaryKeys(b)
	if err != nil {
		t.Fatal(err)
	}
	// gpg --show-keys --with-fingerprint says so.
	if want := "4D64FEC119C2029067D6E791F8D2585B8783D481"; len(fps) != 1 || fps[0] != want {
		t.Errorf("%s: %q, want [%s]", file, fps, want)
	}
	for _, bad := range [][]byte{[]byte("-----BEGIN PGP PUBLIC KEY BLOCK-----"), b[:len(b)-1], {0x99, 0x01}} {
		if fps, err := primaryKeys(bad); err == nil {
			t.Errorf("primaryKeys(%q…) = %q, want an error", bad[:2], fps)
		}
	}
}
