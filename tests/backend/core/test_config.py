"""The backend's settings: generated secrets read from INFERSCALE_SECRETS_DIR (a variable that is
set wins), and placeholders refused wherever they would be reachable."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.cli import autologs_in
from backend.core import secrets
from backend.core.config import Settings, is_loopback

pytestmark = pytest.mark.unit

STRONG = "x" * 32


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("INFERSCALE_ADMIN_KEY", "INFERSCALE_KEY_PEPPER", "INFERSCALE_SERVICE_TOKEN",
                 "INFERSCALE_SECRETS_DIR", "INFERSCALE_ENV"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_generated_secrets_are_read_from_the_directory(
    tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    created = secrets.init(tmp_path)
    assert created == list(secrets.GENERATED)
    clean_env.setenv("INFERSCALE_SECRETS_DIR", str(tmp_path))
    settings = Settings()
    assert settings.admin_api_key == secrets.read(tmp_path, "INFERSCALE_ADMIN_KEY")
    assert settings.service_token == secrets.read(tmp_path, "INFERSCALE_SERVICE_TOKEN")
    assert settings.weak_secrets() == []
    settings.refuse_exposed_placeholders("0.0.0.0")  # generated: fine anywhere


def test_a_variable_that_is_set_wins_over_the_file_and_an_empty_one_does_not(
    tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    secrets.init(tmp_path)
    clean_env.setenv("INFERSCALE_SECRETS_DIR", str(tmp_path))
    clean_env.setenv("INFERSCALE_ADMIN_KEY", "chosen-by-the-operator-0123456789")
    clean_env.setenv("INFERSCALE_KEY_PEPPER", "")  # compose's ${INFERSCALE_KEY_PEPPER:-}
    settings = Settings()
    assert settings.admin_api_key == "chosen-by-the-operator-0123456789"
    assert settings.api_key_pepper == secrets.read(tmp_path, "INFERSCALE_KEY_PEPPER")


def test_placeholders_are_refused_beyond_loopback_only(clean_env: pytest.MonkeyPatch) -> None:
    settings = Settings()  # the dev defaults: dev-admin-key, changeme, dev-service-token
    assert settings.weak_secrets() == [
        "INFERSCALE_ADMIN_KEY", "INFERSCALE_KEY_PEPPER", "INFERSCALE_SERVICE_TOKEN"]  # fmt: skip
    for host in ("127.0.0.1", "::1", "localhost"):
        settings.refuse_exposed_placeholders(host)
    for host in ("0.0.0.0", "::", "10.1.2.3", "api.example.com"):
        with pytest.raises(ValueError, match="placeholder secrets"):
            settings.refuse_exposed_placeholders(host)
    strong = Settings(admin_api_key=STRONG, api_key_pepper=STRONG, service_token=STRONG)
    strong.refuse_exposed_placeholders("0.0.0.0")


def test_prod_refuses_placeholders_wherever_it_listens(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("INFERSCALE_ENV", "prod")
    with pytest.raises(ValueError, match="INFERSCALE_ADMIN_KEY"):
        Settings(api_key_pepper=STRONG, service_token=STRONG)


def test_the_dashboard_logs_in_by_itself_only_on_loopback_outside_prod(
    clean_env: pytest.MonkeyPatch,
) -> None:
    assert autologs_in(Settings(dashboard_host="127.0.0.1"))
    assert not autologs_in(Settings(dashboard_host="0.0.0.0"))  # compose's container address
    clean_env.setenv("INFERSCALE_ENV", "prod")
    strong = Settings(
        dashboard_host="127.0.0.1",
        admin_api_key=STRONG,
        api_key_pepper=STRONG,
        service_token=STRONG,
    )
    assert not autologs_in(strong)


def test_is_loopback() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("127.8.0.1") and is_loopback("[::1]")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.4")
