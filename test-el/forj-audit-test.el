;;; forj-audit-test.el --- The audit table over a real worker's journal  -*- lexical-binding: t; -*-

;;; Commentary:

;; A real worker journals a read, an approved edit and a denied edit;
;; then `forj-audit' lists them, filters them, shows one and exports
;; them, all through the worker's own methods.  The chat's header line
;; shows the worker's count of the chat's tool calls.

;;; Code:

(require 'ert)
(require 'forj-audit)
(require 'forj-usage)
(require 'forj-tools)
(require 'forj-epc-test)

(defun forj-audit-test--batch (worker calls &rest execute)
  "Plan CALLS (plists) on WORKER, then execute with EXECUTE; return the results."
  (let* ((plan (forj-test--call worker "plan" (list :calls (vconcat calls) :session "chat-audit")))
         (done (forj-test--call worker "execute"
                                (append (list :batch_id (plist-get plan :batch_id)) execute))))
    (append (plist-get done :results) nil)))

(defun forj-audit-test--journal (worker)
  "Journal a read, an approved edit and a denied edit of a.txt through WORKER."
  (forj-audit-test--batch
   worker (list (list :id "r1" :name "read_file" :args (list :path "a.txt"))))
  (let ((approved (forj-audit-test--batch
                   worker (list (list :id "e1" :name "edit"
                                      :args (list :path "a.txt" :old_string "one" :new_string "uno")))
                   :approved ["e1"]))
        (denied (forj-audit-test--batch
                 worker (list (list :id "e2" :name "edit"
                                    :args (list :path "a.txt" :old_string "two" :new_string "dos")))
                 :denied (list :e2 "keep two"))))
    (should (eq (plist-get (car approved) :ok) t))
    (should (eq (plist-get (car denied) :ok) :false))))

(defun forj-audit-test--loaded (buffer)
  "Wait until BUFFER has loaded its rows; return them."
  (should (forj-test--wait-for
           (lambda () (with-current-buffer buffer (null forj-audit--state)))
           30))
  (with-current-buffer buffer forj-audit--rows))

(defun forj-audit-test--column (buffer column)
  "The COLUMN (index) of every table line in BUFFER, top to bottom."
  (with-current-buffer buffer
    (mapcar (lambda (entry) (substring-no-properties (aref (cadr entry) column)))
            tabulated-list-entries)))

(ert-deftest forj-test-audit-lists-filters-shows-and-exports ()
  "FR-AUD-06: the audit table over a real session's journal."
  (forj-test-with-project '(("a.txt" . "one\ntwo\n"))
    (let* ((worker (forj-test--worker root))
           (export (make-temp-file "forj-audit-" nil ".jsonl"))
           buffer)
      (unwind-protect
          (progn
            (forj-audit-test--journal worker)
            (setq buffer (save-window-excursion (forj-audit root)))
            ;; Every call, newest first, with who decided and how it ended.
            (let ((rows (forj-audit-test--loaded buffer)))
              (should (= (length rows) 3))
              (should (equal (forj-audit-test--column buffer 1) '("edit" "edit" "read_file")))
              (should (equal (forj-audit-test--column buffer 3) '("review" "review" "mode")))
              (should (equal (forj-audit-test--column buffer 4) '("refused" "ok" "ok")))
              (should (equal (forj-audit-test--column buffer 6) '("" "a.txt" "")))
              (should (string-prefix-p "a.txt" (nth 2 (forj-audit-test--column buffer 2))))
              (should (equal (plist-get (car rows) :decision) "denied by the user: keep two")))
            ;; Filters: by outcome, then by text, then none.
            (with-current-buffer buffer (forj-audit-filter-outcome "refused"))
            (forj-audit-test--loaded buffer)
            (should (equal (forj-audit-test--column buffer 4) '("refused")))
            (with-current-buffer buffer
              (forj-audit-clear-filters)
              (forj-audit-test--loaded buffer)
              (forj-audit-filter-text "uno"))
            (forj-audit-test--loaded buffer)
            (should (equal (forj-audit-test--column buffer 4) '("ok")))
            (with-current-buffer buffer (forj-audit-filter-tool "read_file"))
            (forj-audit-test--loaded buffer)
            (should (null (forj-audit-test--column buffer 1))) ; text and tool together: none
            (with-current-buffer buffer (forj-audit-clear-filters))
            (forj-audit-test--loaded buffer)
            ;; RET on the approved edit shows the call and its result.
            (let ((stale (get-buffer "*forj-audit-call*")))
              (when stale (kill-buffer stale)))
            (with-current-buffer buffer
              (goto-char (point-min))
              (forward-line 1)
              (save-window-excursion (forj-audit-show)))
            (should (forj-test--wait-for
                     (lambda ()
                       (let ((shown (get-buffer "*forj-audit-call*")))
                         (and shown (with-current-buffer shown
                                      (string-match-p "Result:" (buffer-string))))))
                     30))
            (with-current-buffer "*forj-audit-call*"
              (should (string-match-p "Decided by: review: approved by the user" (buffer-string)))
              (should (string-match-p "\"new_string\": \"uno\"" (buffer-string)))
              (should (string-match-p "\"ok\": true" (buffer-string))))
            ;; Export: one JSON object a line, every row.
            (let ((written nil))
              (with-current-buffer buffer
                (let ((forj-audit-page-size 1)) ; several pages
                  (forj-audit-export export (lambda (n) (setq written n)))))
              (should (forj-test--wait-for (lambda () written) 30))
              (should (equal written 3))
              (let ((lines (with-temp-buffer
                             (insert-file-contents export)
                             (split-string (buffer-string) "\n" t))))
                (should (= (length lines) 3))
                (should (equal (mapcar (lambda (line)
                                         (plist-get (json-parse-string line :object-type 'plist)
                                                    :call_id))
                                       lines)
                               '("e2" "e1" "r1"))))))
        (when (buffer-live-p buffer) (kill-buffer buffer))
        (when (get-buffer "*forj-audit-call*") (kill-buffer "*forj-audit-call*"))
        (delete-file export)))))

(ert-deftest forj-test-usage-tool-metrics-in-the-header ()
  "FR-MET-03: the chat's header counts its tool calls and failures, unless turned off."
  (forj-test-with-project '(("a.txt" . "one\n"))
    (let ((worker (forj-test--worker root)))
      (with-temp-buffer
        (setq-local forj-session (forj-session-create :root root))
        (let ((session (forj-tools-session-id)))
          (dolist (path '("a.txt" "missing.txt"))
            (let ((plan (forj-test--call
                         worker "plan"
                         (list :calls (vector (list :id path :name "read_file" :args (list :path path)))
                               :session session))))
              (forj-test--call worker "execute" (list :batch_id (plist-get plan :batch_id))))))
        (forj-usage-refresh-tool-metrics)
        (should (forj-test--wait-for (lambda () forj-usage-tool-metrics) 30))
        (should (equal (forj-usage-tools-header) "tools 2 (1 failed)"))
        (let ((forj-usage-last nil))
          (should (string-suffix-p " · tools 2 (1 failed)"
                                   (forj-usage-header (list :model "m") 10 nil))))
        (let ((forj-usage-show-tool-metrics nil))
          (should (null (forj-usage-tools-header)))
          (should-not (string-match-p "tools" (forj-usage-header (list :model "m") 10 nil))))))))

(provide 'forj-audit-test)
;;; forj-audit-test.el ends here
