"""bench/conformance reads the utests' results from CUnit's verbose output:
here a real CUnit program (built in the test) passes one test, fails one,
prints in the middle of a third and dies in a fourth, and the rows say so."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/ is not installed
from bench.conformance.runs import _declared, parse_cunit  # noqa: E402

PROGRAM = r"""
#include <stdio.h>
#include <stdlib.h>
#include <CUnit/Basic.h>
static void good(void) { CU_TEST(1 == 1); }
static void bad(void) { CU_TEST(1 == 2); }
static void chatty(void) { printf("noise that ends FAILED\n"); CU_TEST(1); }
static void dies(void) { fflush(stdout); abort(); }
static void never(void) { CU_TEST(1); }
int main(void)
{
	CU_pSuite s;
	CU_initialize_registry();
	s = CU_add_suite("demo", NULL, NULL);
	CU_add_test(s, "good one", good);
	CU_add_test(s, "bad one", bad);
	CU_add_test(s, "chatty one", chatty);
	CU_add_test(s, "dies", dies);
	CU_add_test(s, "never", never);
	CU_basic_set_mode(CU_BRM_VERBOSE);
	CU_basic_run_tests();
	return 0;
}
"""


@pytest.fixture(scope="module")
def cunit_output(tmp_path_factory):
    if not Path("/usr/include/CUnit/Basic.h").is_file() or shutil.which("gcc") is None:
        pytest.skip("CUnit or gcc missing (apt-get install libcunit1-dev gcc)")
    d = tmp_path_factory.mktemp("cunit")
    (d / "demo-utest.c").write_text(PROGRAM)
    subprocess.run(["gcc", "-o", d / "trace-utest", d / "demo-utest.c", "-lcunit"], check=True)
    out = d / "stdout"
    with open(out, "wb") as f:  # as the runner runs it: output to a file, line-buffered
        subprocess.run(["stdbuf", "-oL", d / "trace-utest"], stdout=f, stderr=subprocess.STDOUT)
    return d, out


def test_results_of_a_real_cunit_run(cunit_output):
    d, out = cunit_output
    rows = parse_cunit(out, _declared(d / "trace-utest"))
    assert rows == {"good one": "PASS", "bad one": "FAIL", "chatty one": "PASS",
                    "dies": "NOT RUN", "never": "NOT RUN"}
