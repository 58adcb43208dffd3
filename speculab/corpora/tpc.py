"""TPC-style schema specifications, written for speculab, for "implement the SQL schema for" prompts.

Knows: table and column descriptions in the style of the TPC-H, TPC-C and
TPC-DS benchmarks (paraphrased from their public data models; no TPC text or
kit is copied). Does not know: SQL; writing it is the model's task.
"""

from __future__ import annotations

TPC_SPECS: dict[str, str] = {
    "tpc-h": """\
A wholesale supplier database in the style of TPC-H. Eight tables.
- REGION: region key (integer, primary key), name (25 chars), comment (152 chars).
- NATION: nation key (integer, primary key), name (25 chars), region key (references REGION), comment (152 chars).
- SUPPLIER: supplier key (integer, primary key), name (25 chars), address (40 chars, variable),
  nation key (references NATION), phone (15 chars), account balance (decimal 15,2), comment (101 chars).
- CUSTOMER: customer key (integer, primary key), name (25 chars, variable), address (40 chars, variable),
  nation key (references NATION), phone (15 chars), account balance (decimal 15,2),
  market segment (10 chars: AUTOMOBILE, BUILDING, FURNITURE, MACHINERY or HOUSEHOLD), comment (117 chars).
- PART: part key (integer, primary key), name (55 chars, variable), manufacturer (25 chars), brand (10 chars),
  type (25 chars, variable), size (integer, 1 to 50), container (10 chars), retail price (decimal 15,2), comment (23 chars).
- PARTSUPP: part key (references PART), supplier key (references SUPPLIER), available quantity (integer),
  supply cost (decimal 15,2), comment (199 chars); the primary key is (part key, supplier key).
- ORDERS: order key (bigint, primary key), customer key (references CUSTOMER), order status (1 char: F, O or P),
  total price (decimal 15,2), order date (date), order priority (15 chars), clerk (15 chars),
  ship priority (integer), comment (79 chars).
- LINEITEM: order key (references ORDERS), line number (integer, 1 to 7), part key and supplier key
  (together reference PARTSUPP), quantity (decimal 15,2), extended price (decimal 15,2), discount (decimal 15,2,
  between 0.00 and 0.10), tax (decimal 15,2, between 0.00 and 0.08), return flag (1 char: R, A or N),
  line status (1 char: O or F), ship date, commit date and receipt date (dates; receipt after ship),
  ship instructions (25 chars), ship mode (10 chars), comment (44 chars); primary key (order key, line number).
Rules: money is never negative except account balances; an order's total price is the sum of its line items'
extended price × (1 + tax) × (1 − discount); the pricing summary report groups line items by return flag and
line status for a ship-date range; the shipping priority query ranks unshipped orders of one market segment by
revenue. Index the foreign keys and the dates that these two reports filter on.""",
    "tpc-c": """\
An order-entry database in the style of TPC-C, for a wholesale company with warehouses and sales districts.
- WAREHOUSE: id (integer, primary key), name (10 chars), street 1 and 2 (20 chars each), city (20 chars),
  state (2 chars), zip (9 chars), tax rate (decimal 4,4), year-to-date balance (decimal 12,2).
- DISTRICT: id (integer 1 to 10) within its warehouse (references WAREHOUSE); primary key (warehouse, id);
  name, address fields as for a warehouse, tax rate, year-to-date balance, and the next available order id (integer).
- CUSTOMER: id (integer 1 to 3000) within its district; primary key (warehouse, district, id); first name
  (16 chars), middle (2 chars), last name (16 chars), address fields, phone (16 chars), since (timestamp),
  credit (2 chars: GC good or BC bad), credit limit (decimal 12,2), discount (decimal 4,4), balance (decimal 12,2),
  year-to-date payment (decimal 12,2), payment count, delivery count (integers), data (500 chars, variable).
- HISTORY: customer (warehouse, district, id) and the district paid (warehouse, district), date (timestamp),
  amount (decimal 6,2), data (24 chars); it has no primary key.
- NEW_ORDER: (warehouse, district, order id) primary key, referencing ORDERS; rows are deleted on delivery.
- ORDERS: id within its district; primary key (warehouse, district, id); customer id, entry date (timestamp),
  carrier id (integer 1 to 10, null until delivered), line count (integer 5 to 15), all-local flag (integer 0 or 1).
- ORDER_LINE: (warehouse, district, order id, line number) primary key; item id (references ITEM), supplying
  warehouse (references WAREHOUSE), delivery date (timestamp, null until delivered), quantity (integer),
  amount (decimal 6,2), district info (24 chars).
- ITEM: id (integer, primary key, 1 to 100000), image id (integer), name (24 chars), price (decimal 5,2), data (50 chars).
- STOCK: (warehouse, item) primary key; quantity (integer, −32768 to 32767), ten district info fields (24 chars each),
  year-to-date quantity, order count, remote count (integers), data (50 chars).
Rules: the New-Order transaction reads and increments a district's next order id, inserts ORDERS, NEW_ORDER and
5 to 15 ORDER_LINE rows, and updates STOCK; the Payment transaction looks customers up by last name within a
district; the Stock-Level transaction counts recent order lines of a district whose item stock is below a
threshold. Give the indexes these transactions need, and the constraints that keep ids in range.""",
    "tpc-ds": """\
A retail data warehouse in the style of TPC-DS: a star schema around store sales, with date and time dimensions.
- DATE_DIM: date surrogate key (integer, primary key), the calendar date (unique), year, quarter of year, month of
  year, day of month, day of week name (9 chars), week sequence, fiscal year, holiday, weekend and
  following-holiday flags (1 char each).
- TIME_DIM: time surrogate key (integer, primary key), time of day in seconds, hour, minute, second,
  AM/PM (2 chars), shift (20 chars), meal time (20 chars, nullable).
- ITEM: item surrogate key (integer, primary key), business item id (16 chars), valid-from and valid-to dates
  (slowly changing dimension, type 2), description (200 chars), current price and wholesale cost (decimal 7,2),
  brand, class, category and manufacturer (with ids and names), size, color, units, container (short strings).
- CUSTOMER: customer surrogate key (integer, primary key), business customer id (16 chars), current address key
  (references CUSTOMER_ADDRESS), current demographics key (references CUSTOMER_DEMOGRAPHICS), first sales date and
  first ship-to date (references DATE_DIM), salutation, first and last name, preferred-customer flag,
  birth day, month and year, birth country, login, email address (50 chars).
- CUSTOMER_ADDRESS: address surrogate key (primary key), business id, street number, name and type, suite,
  city, county, state (2 chars), zip (10 chars), country, GMT offset (decimal 5,2), location type.
- CUSTOMER_DEMOGRAPHICS: demographics key (primary key), gender, marital status, education status,
  purchase estimate, credit rating, dependent counts.
- STORE: store surrogate key (primary key), business id, valid-from and valid-to dates, name, number of employees,
  floor space, hours, manager, market id, geography class, market manager, tax percentage (decimal 5,2),
  and an address as in CUSTOMER_ADDRESS.
- PROMOTION: promotion key (primary key), business id, start and end dates (references DATE_DIM), item
  (references ITEM), cost (decimal 15,2), channel flags (direct mail, email, catalog, tv, radio, press, event, demo).
- STORE_SALES (fact): sold date and sold time (references DATE_DIM and TIME_DIM, nullable), item, customer,
  customer demographics, address, store and promotion (references to the dimensions), ticket number (bigint);
  primary key (item, ticket number); quantity (integer), wholesale cost, list price, sales price, discount amount,
  extended sales price, extended wholesale cost, extended list price, extended tax, coupon amount, net paid,
  net paid including tax and net profit (all decimal 7,2).
- STORE_RETURNS (fact): returned date and time, item, customer, store, reason, ticket number (with item,
  references STORE_SALES), return quantity, return amount, tax, fee, refunded cash, reversed charge,
  store credit and net loss (decimal 7,2).
Rules: every fact references dimensions by surrogate key; sales reports join STORE_SALES to DATE_DIM by year and
month and group by item brand and store; returns can only reference an existing sale. Partition STORE_SALES by
sold date, and add the indexes for the reports described.""",
}

TPC_TEMPLATE = (
    "Implement the SQL schema for the following specification, for PostgreSQL: CREATE TABLE statements "
    "with the right types, primary keys, foreign keys, CHECK constraints and indexes, then one example "
    "query for each report it mentions.\n\n{spec}"
)
