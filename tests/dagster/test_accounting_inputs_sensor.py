"""The intensity and tariff sensor: a file added or changed in either landing folder asks
once for the asset that reads it, after its quiet period; an unlistable folder is named."""

import os
import shutil
from pathlib import Path

import dagster as dg

from resources import AccountingSettings
from sensors.accounting_inputs import INTENSITY, TARIFFS, evaluate
from tests.dagster_sqlite import empty_instance

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _folders(tmp_path: Path) -> AccountingSettings:
    intensity, tariffs = tmp_path / "intensity", tmp_path / "tariffs"
    intensity.mkdir()
    shutil.copy(EXAMPLES / "intensity" / "DE_demo-weeks_hourly.csv", intensity)
    shutil.copytree(EXAMPLES / "tariffs", tariffs)
    return AccountingSettings(intensity_landing=str(intensity), tariff_landing=str(tariffs))


class Ticks:
    def __init__(self, instance: dg.DagsterInstance, settings: AccountingSettings):
        self.instance, self.settings, self.cursor = instance, settings, None

    def __call__(self, quiet_s: float = 0.0) -> dg.SensorResult:
        with dg.build_sensor_context(instance=self.instance, cursor=self.cursor) as context:
            result = evaluate(context, self.settings, quiet_s)
        self.cursor = result.cursor
        return result


def test_a_changed_folder_is_read_once_after_its_quiet_period(tmp_path):
    settings = _folders(tmp_path)
    with empty_instance() as instance:
        tick = Ticks(instance, settings)
        [first] = tick().run_requests  # nothing read yet: both
        assert first.asset_selection == [INTENSITY, TARIFFS]
        quiet = tick()
        assert quiet.run_requests == []
        assert quiet.skip_reason.skip_message == "no intensity or tariff file changed"

        new = Path(settings.intensity_landing) / "DE_next.csv"
        shutil.copy(EXAMPLES / "intensity" / "DE_demo-weeks_hourly.csv", new)
        waiting = tick(quiet_s=3600)
        assert waiting.run_requests == []
        assert waiting.skip_reason.skip_message == (f"carbon_intensity: {settings.intensity_landing} "
                                        "changed, waiting for its 3600 s quiet period")
        [second] = tick().run_requests
        assert second.asset_selection == [INTENSITY]  # the tariffs did not change
        assert second.run_key != first.run_key
        assert tick().run_requests == []

        os.utime(Path(settings.tariff_landing) / "hpc-centre.csv", ns=(0, 0))  # rewritten
        new.unlink()  # and an intensity file removed
        [third] = tick().run_requests
        assert third.asset_selection == [INTENSITY, TARIFFS]

        provider = Path(settings.intensity_landing) / "provider"  # read recursively
        provider.mkdir()
        (provider / "README.txt").write_text("not read\n")
        assert tick().run_requests == []
        shutil.copy(EXAMPLES / "intensity" / "FR_2023-02_30min.csv", provider)
        [fourth] = tick().run_requests
        assert fourth.asset_selection == [INTENSITY]
        (provider / "FR_2023-02_30min.csv").unlink()  # back to the third's listing
        [fifth] = tick().run_requests
        assert fifth.asset_selection == [INTENSITY]
        # the third's listing again, asked for again (a run key of its own)
        assert fifth.run_key.split(":")[0] == third.run_key.split(":")[0]


def test_a_folder_that_cannot_be_listed_is_named_and_kept_until_back(tmp_path):
    settings = _folders(tmp_path)
    with empty_instance() as instance:
        tick = Ticks(instance, settings)
        assert len(tick().run_requests) == 1
        hidden = tmp_path / "away"
        Path(settings.tariff_landing).rename(hidden)  # unmounted
        gone = tick()
        assert gone.run_requests == []
        assert gone.skip_reason.skip_message.startswith(
            f"tariffs: {settings.tariff_landing} cannot be listed (No such file or directory")
        hidden.rename(settings.tariff_landing)  # back, unchanged: nothing to read again
        assert tick().run_requests == []
