from inventory import Stock


def test_add_and_count():
    stock = Stock()
    stock.add("apple", 5)
    assert stock.count("apple") == 5


def test_remove():
    stock = Stock()
    stock.add("apple", 5)
    stock.remove("apple", 2)
    assert stock.count("apple") == 3
