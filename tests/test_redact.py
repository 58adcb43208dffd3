"""Secrets never leave the process in a command line."""

from speculab.redact import REDACTED, redact_argv, redact_command


def test_api_key_values_are_replaced_in_both_spellings():
    assert redact_argv(["serve", "--api-key", "sekret", "--port", "1"]) == ["serve", "--api-key", REDACTED, "--port", "1"]
    assert redact_argv(["serve", "--api-key=sekret"]) == ["serve", f"--api-key={REDACTED}"]
    assert "sekret" not in redact_command("speculab serve --api-key sekret --port 8000")
    assert "sekret" not in redact_command("speculab serve '--api-key=sekret'")


def test_authorization_credentials_are_replaced():
    assert "abc" not in redact_command("curl -H 'Authorization: Bearer abc' http://127.0.0.1")
    assert redact_command(None) is None
    assert redact_command("speculab serve --port 8000") == "speculab serve --port 8000"


def test_text_that_is_not_shell_syntax_is_cut_at_the_flag():
    assert "sekret" not in redact_command('speculab serve --api-key "sekret')
