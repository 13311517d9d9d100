import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tally.stats import mean, midrange  # noqa: E402


class StatsTest(unittest.TestCase):
    def test_mean(self) -> None:
        self.assertEqual(mean([2, 4, 6]), 4)

    def test_mean_of_nothing_is_an_error(self) -> None:
        with self.assertRaises(ValueError):
            mean([])

    def test_midrange(self) -> None:
        self.assertEqual(midrange([1, 9, 3]), 5)


if __name__ == "__main__":
    unittest.main()
