"""infra/house.py, the gate for what xenon cannot see: closures are blocks too."""

from infra.house import Limits, blocks, class_sizes

NESTED = """
def outer(x):
    def inner(y):
        if y == 1: return 1
        if y == 2: return 2
        if y == 3: return 3
        if y == 4: return 4
        if y == 5: return 5
        if y == 6: return 6
        return 0
    return inner(x)

class K:
    def method(self):
        def helper():
            return 1
        return helper()
"""


def test_a_function_defined_inside_another_is_a_block_of_its_own():
    found = {b.name: b for b in blocks("m.py", NESTED)}
    assert set(found) == {"outer", "outer.inner", "K.method", "K.method.helper"}
    assert found["outer.inner"].nested and found["outer.inner"].rank == "B"
    assert found["outer.inner"].complexity == 7
    assert not found["outer"].nested and found["outer"].complexity == 1


def test_methods_are_counted_once_per_class():
    assert dict(class_sizes(NESTED)) == {"K": 1}
    assert [b.name for b in blocks("m.py", NESTED)].count("K.method") == 1


def test_the_limits_are_read_from_pyproject_and_name_why_for_every_exception():
    limits = Limits.from_pyproject()
    assert limits.max_rank == "C" and limits.max_nested_rank == "B"
    assert limits.max_module_lines == 600 and limits.max_class_methods == 30
    assert all(reason.strip() for reason in limits.known.values())
