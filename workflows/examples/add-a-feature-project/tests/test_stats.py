import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tally.stats import mean  # noqa: E402


class StatsTest(unittest.TestCase):
    def test_mean(self) -> None:
        self.assertEqual(mean([2, 4, 6]), 4)

    def test_mean_of_nothing_is_an_error(self) -> None:
        with self.assertRaises(ValueError):
            mean([])


if __name__ == "__main__":
    unittest.main()
