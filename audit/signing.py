"""PAdES signatures for reports: a report is only evidence if a changed byte is detectable.

Keys are ECDSA P-256. By default a self-signed certificate is generated (dev/demo: whoever
verifies must be handed that certificate as the trust root); production loads a key and a
certificate from PEM files, e.g. one issued by the organisation's CA.

:func:`verify_pdf` accepts a document only when its one signature is cryptographically intact,
chains to the given trusted certificate and covers the whole file: bytes appended after signing
(an incremental update) are refused too, since a report is never legitimately edited.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from io import BytesIO
from pathlib import Path

from asn1crypto import keys as asn1_keys
from asn1crypto import x509 as asn1_x509
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter
from pyhanko.pdf_utils.reader import PdfFileReader
from pyhanko.sign.fields import SigSeedSubFilter
from pyhanko.sign.general import SigningError
from pyhanko.sign.signers import PdfSignatureMetadata, PdfSigner, SimpleSigner
from pyhanko.sign.validation import validate_pdf_signature
from pyhanko.sign.validation.errors import SignatureValidationError
from pyhanko.sign.validation.status import SignatureCoverageLevel
from pyhanko_certvalidator import ValidationContext
from pyhanko_certvalidator.registry import SimpleCertificateStore

FIELD_NAME = "GreentwinReportSignature"
DEFAULT_COMMON_NAME = "greentwin report signer (self-signed)"


@dataclass(frozen=True)
class VerifyOutcome:
    """Result of :func:`verify_pdf`; ``signer`` is the certificate subject when one was found."""

    ok: bool
    reason: str
    signer: str | None = None


@dataclass(frozen=True)
class SigningIdentity:
    """A private key and the certificate that names it."""

    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate


def generate_identity(common_name: str = DEFAULT_COMMON_NAME, *, valid_days: int = 3650) -> SigningIdentity:
    """Fresh P-256 key and self-signed certificate fit for document signing (dev/demo)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, "greentwin")])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1))  # tolerate a verifier's clock running behind
        .not_valid_after(now + timedelta(days=valid_days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(digital_signature=True, content_commitment=True, key_cert_sign=True,
                          key_encipherment=False, data_encipherment=False, key_agreement=False,
                          crl_sign=False, encipher_only=False, decipher_only=False),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return SigningIdentity(key, cert)


def load_identity(key_pem: Path | str, cert_pem: Path | str,
                  password: bytes | None = None) -> SigningIdentity:
    """Key and certificate from PEM files; refuses anything but an EC key matching the certificate."""
    key = serialization.load_pem_private_key(Path(key_pem).read_bytes(), password=password)
    cert = load_certificate(cert_pem)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{key_pem}: expected an EC private key, got {type(key).__name__}")
    if key.public_key() != cert.public_key():
        raise ValueError(f"{cert_pem} does not certify the key in {key_pem}")
    return SigningIdentity(key, cert)


def load_certificate(cert_pem: Path | str) -> x509.Certificate:
    """One PEM certificate (the trust root handed to :func:`verify_pdf`)."""
    return x509.load_pem_x509_certificate(Path(cert_pem).read_bytes())


def identity_pem(identity: SigningIdentity) -> tuple[bytes, bytes]:
    """(key, certificate) as PEM; the key unencrypted, so whoever stores it must keep it owner-only."""
    key_bytes = identity.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption())
    return key_bytes, identity.cert.public_bytes(serialization.Encoding.PEM)


def save_identity(identity: SigningIdentity, key_pem: Path, cert_pem: Path) -> None:
    """Write key (mode 0600, unencrypted: dev/demo only) and certificate as PEM."""
    key_pem.parent.mkdir(parents=True, exist_ok=True)
    cert_pem.parent.mkdir(parents=True, exist_ok=True)
    key_bytes, cert_bytes = identity_pem(identity)
    key_pem.touch(mode=0o600, exist_ok=True)
    key_pem.chmod(0o600)
    key_pem.write_bytes(key_bytes)
    cert_pem.write_bytes(cert_bytes)


def _asn1_cert(cert: x509.Certificate) -> asn1_x509.Certificate:
    return asn1_x509.Certificate.load(cert.public_bytes(serialization.Encoding.DER))


def _subject(cert: x509.Certificate | asn1_x509.Certificate) -> str:
    if isinstance(cert, asn1_x509.Certificate):
        return str(cert.subject.human_friendly)
    return cert.subject.rfc4514_string()


def sign_pdf(pdf_bytes: bytes, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate, *,
             reason: str = "greentwin report: issued unchanged") -> bytes:
    """The PDF with an invisible PAdES (ETSI.CAdES.detached, SHA-256) signature appended."""
    der_key = key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    signer = SimpleSigner(
        signing_cert=_asn1_cert(cert),
        signing_key=asn1_keys.PrivateKeyInfo.load(der_key),
        cert_registry=SimpleCertificateStore(),
    )
    meta = PdfSignatureMetadata(field_name=FIELD_NAME, md_algorithm="sha256",
                                subfilter=SigSeedSubFilter.PADES, reason=reason)
    writer = IncrementalPdfFileWriter(BytesIO(pdf_bytes))
    out = PdfSigner(meta, signer).sign_pdf(writer, output=BytesIO())
    return out.getvalue()


def verify_pdf(pdf_bytes: bytes, trusted_cert: x509.Certificate) -> VerifyOutcome:
    """Check the report's signature against ``trusted_cert``; never raises for a bad document."""
    try:
        reader = PdfFileReader(BytesIO(pdf_bytes), strict=False)
        sigs = reader.embedded_signatures
    except Exception as exc:  # a damaged file is a failed verification, not a crash
        return VerifyOutcome(False, f"not a readable PDF: {exc}")
    if not sigs:
        return VerifyOutcome(False, "no signature")
    if len(sigs) != 1:
        return VerifyOutcome(False, f"expected one signature, found {len(sigs)}")
    embedded = sigs[0]
    signer = _subject(embedded.signer_cert) if embedded.signer_cert is not None else None
    ctx = ValidationContext(trust_roots=[_asn1_cert(trusted_cert)])
    try:
        # No diff analysis: any later revision is refused below, whatever it changes.
        status = validate_pdf_signature(embedded, ctx, skip_diff=True)
    except (SignatureValidationError, SigningError, ValueError, KeyError) as exc:
        return VerifyOutcome(False, f"signature could not be validated: {exc}", signer)
    if not status.intact:
        return VerifyOutcome(False, "signed content was modified (digest mismatch)", signer)
    if not status.valid:
        return VerifyOutcome(False, "signature value is invalid", signer)
    if not status.trusted:
        return VerifyOutcome(False, "signer certificate is not trusted", signer)
    if status.coverage != SignatureCoverageLevel.ENTIRE_FILE:
        return VerifyOutcome(False, "signature does not cover the whole file (content added after signing)",
                             signer)
    return VerifyOutcome(True, "signature valid, trusted, covers the entire file", signer)
