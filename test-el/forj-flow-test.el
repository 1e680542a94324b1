;;; forj-flow-test.el --- The batch flow against the real worker  -*- lexical-binding: t; -*-

;;; Commentary:

;; Tool-call blocks in a buffer, planned, reviewed (decisions made
;; programmatically in the real review buffer), executed by the real
;; worker and rendered back as tool-result blocks.

;;; Code:

(require 'ert)
(require 'forj-tools)
(require 'ediff)
(require 'forj-epc-test)

(defun forj-flow-test--run (root text)
  "Insert TEXT in a new buffer and run its blocks in ROOT; return (BUFFER . RESULTS)."
  (let ((buffer (generate-new-buffer "*forj-flow-test*"))
        (results 'waiting))
    (with-current-buffer buffer
      (insert text)
      (forj-tools-run-region (point-min) (point-max) (lambda (r) (setq results r)) root))
    (cons buffer (lambda () (unless (eq results 'waiting) results)))))

(defun forj-flow-test--review-buffer ()
  "Wait for the review buffer and return it."
  (forj-test--wait-for (lambda () (get-buffer "*forj-review*")) 30)
  (get-buffer "*forj-review*"))

(ert-deftest forj-test-flow-reads-render-results ()
  "Read calls run without review and render as tool-result blocks after the calls."
  (forj-test-with-project '(("a.txt" . "alpha\n") ("b.txt" . "beta\n"))
    (let* ((run (forj-flow-test--run root "Reading.

```tool-call
{\"id\": \"1\", \"name\": \"read_file\", \"args\": {\"path\": \"a.txt\"}}
```
```tool-call
{\"id\": \"2\", \"name\": \"read_file\", \"args\": {\"path\": \"../b.txt\"}}
```
```tool-call
{\"id\": \"3\" \"name\": oops}
```
"))
           (buffer (car run))
           (results (progn (forj-test--wait-for (cdr run) 30) (funcall (cdr run)))))
      (should (= (length results) 3))
      (should (eq (plist-get (nth 0 results) :ok) t))
      (should (equal (plist-get (plist-get (nth 1 results) :error) :type) "validation-error"))
      (should (string-match-p "Invalid JSON" (plist-get (plist-get (nth 2 results) :error) :message)))
      (with-current-buffer buffer
        (let ((text (buffer-string)))
          (should (string-match-p "✓ read_file a.txt\n```tool-result\n{\"id\":\"1\"" text))
          (should (string-match-p "✗ Path '../b.txt' contains '..'" text))
          (should (= (how-many "^```tool-result$" (point-min) (point-max)) 3))))
      (kill-buffer buffer))))

(ert-deftest forj-test-flow-approve-one-deny-one-with-a-reason ()
  "Edits wait for review; the approved one runs, the denied one tells the model why."
  (forj-test-with-project '(("x.txt" . "x\n"))
    (let* ((run (forj-flow-test--run root "```tool-call
{\"id\": \"w1\", \"name\": \"write_file\", \"args\": {\"path\": \"new1.txt\", \"content\": \"one\\n\"}}
```
```tool-call
{\"id\": \"w2\", \"name\": \"write_file\", \"args\": {\"path\": \"new2.txt\", \"content\": \"two\\n\"}}
```
"))
           (review (forj-flow-test--review-buffer)))
      (should review)
      (with-current-buffer review
        (should (string-match-p "+one" (buffer-string)))
        (forj-review-decide "w1" t)
        (forj-review-decide "w2" (cons 'deny "use new1.txt only"))
        (forj-review-commit))
      (should (forj-test--wait-for (cdr run) 30))
      (let ((results (funcall (cdr run))))
        (should (eq (plist-get (nth 0 results) :ok) t))
        (should (equal (plist-get (plist-get (nth 1 results) :error) :message)
                       "The user denied this call: use new1.txt only")))
      (should (file-exists-p (expand-file-name "new1.txt" root)))
      (should-not (file-exists-p (expand-file-name "new2.txt" root)))
      (kill-buffer (car run)))))

(ert-deftest forj-test-flow-approve-all-and-revert-visiting-buffers ()
  "Approve all; a buffer visiting an edited file shows the new text, point kept."
  (forj-test-with-project '(("f.txt" . "one\ntwo\nthree\n"))
    (let ((visiting (find-file-noselect (expand-file-name "f.txt" root))))
      (with-current-buffer visiting (goto-char (point-min)) (forward-line 2))
      (let* ((run (forj-flow-test--run root "```tool-call
{\"id\": \"r\", \"name\": \"read_file\", \"args\": {\"path\": \"f.txt\"}}
```
```tool-call
{\"id\": \"e\", \"name\": \"edit\", \"args\": {\"path\": \"f.txt\", \"old_string\": \"two\", \"new_string\": \"TWO\"}}
```
"))
             (review (forj-flow-test--review-buffer)))
        (with-current-buffer review
          (forj-review-approve-all)
          (forj-review-commit))
        (should (forj-test--wait-for (cdr run) 30))
        (should (eq (plist-get (nth 1 (funcall (cdr run))) :ok) t))
        (with-current-buffer visiting
          (should (equal (buffer-string) "one\nTWO\nthree\n"))
          (should (= (line-number-at-pos) 3)))
        (kill-buffer visiting)
        (kill-buffer (car run))))))

(ert-deftest forj-test-flow-edit-before-approve ()
  "The user edits the proposal in ediff; the user's text is written and the result says so."
  (forj-test-with-project '(("f.py" . "a = 1\nb = 2\n"))
    (let* ((run (forj-flow-test--run root "```tool-call
{\"id\": \"r\", \"name\": \"read_file\", \"args\": {\"path\": \"f.py\"}}
```
```tool-call
{\"id\": \"e\", \"name\": \"edit\", \"args\": {\"path\": \"f.py\", \"old_string\": \"b = 2\", \"new_string\": \"b = 3\"}}
```
"))
           (review (forj-flow-test--review-buffer))
           (ediff-window-setup-function #'ediff-setup-windows-plain)
           proposed)
      (with-current-buffer review
        (goto-char (point-min))
        (forj-review-next)
        (forj-review-edit))
      ;; The proposal arrives asynchronously and ediff opens on it.
      (should (forj-test--wait-for
               (lambda () (setq proposed (get-buffer "*forj-proposed: f.py*"))) 30))
      (with-current-buffer proposed
        (should (equal (buffer-string) "a = 1\nb = 3\n"))
        (should (derived-mode-p 'python-mode))
        (goto-char (point-max))
        (insert "c = 4\n"))
      (with-current-buffer (get-buffer "*forj-current: f.py*")
        (should buffer-read-only)
        (should (equal (buffer-string) "a = 1\nb = 2\n")))
      ;; Quit ediff as the user would (q, then yes).
      (let ((control (cl-find-if (lambda (b) (string-prefix-p "*Ediff Control" (buffer-name b)))
                                 (buffer-list))))
        (should control)
        (with-current-buffer control
          (cl-letf (((symbol-function 'y-or-n-p) (lambda (&rest _) t)))
            (ediff-quit nil))))
      (should-not (get-buffer "*forj-proposed: f.py*"))
      (with-current-buffer review
        (should (string-match-p "\\[edited\\].*\n    you edited: f.py" (buffer-string)))
        (forj-review-commit))
      (should (forj-test--wait-for (cdr run) 30))
      (let ((result (nth 1 (funcall (cdr run)))))
        (should (eq (plist-get result :ok) t))
        (should (eq (plist-get (plist-get result :result) :user_modified) t))
        (should (string-match-p "^\\+c = 4$" (plist-get (plist-get result :result) :preview))))
      (should (equal (with-temp-buffer
                       (insert-file-contents (expand-file-name "f.py" root))
                       (buffer-string))
                     "a = 1\nb = 3\nc = 4\n"))
      (kill-buffer (car run)))))

(ert-deftest forj-test-flow-result-paths-are-buttons-and-long-results-fold ()
  "Paths and path:line in result bodies open the file at the line; long results fold."
  (forj-test-with-project `(("src/a.txt" . "one\ntwo\nthe needle\n")
                            ("big.txt" . ,(mapconcat (lambda (i) (format "line %d" i))
                                                     (number-sequence 1 400) "\n")))
    (let* ((run (forj-flow-test--run root "```tool-call
{\"id\": \"s\", \"name\": \"search\", \"args\": {\"query\": \"needle\"}}
```
```tool-call
{\"id\": \"b\", \"name\": \"read_file\", \"args\": {\"path\": \"big.txt\"}}
```
"))
           (buffer (car run)))
      (should (forj-test--wait-for (cdr run) 30))
      (with-current-buffer buffer
        (goto-char (point-min))
        (should (search-forward "\"path\":\"src/a.txt\"" nil t))
        (let ((button (button-at (- (point) 3))))
          (should button)
          (should (equal (button-get button 'forj-line) 3))
          (save-window-excursion
            (push-button (button-start button))
            (should (equal (file-name-nondirectory (buffer-file-name)) "a.txt"))
            (should (= (line-number-at-pos) 3))
            (kill-buffer)))
        ;; The long read is folded: its text is all there, its end hidden.
        (should (string-match-p "line 400" (buffer-string)))
        (goto-char (point-min))
        (search-forward "line 400")
        (should (invisible-p (point)))
        (search-backward "```tool-result")
        (forward-line 1)
        (forj-tools-toggle-fold)
        (search-forward "line 400")
        (should-not (invisible-p (point)))
        (forj-tools-toggle-fold)
        (should (invisible-p (point))))
      (kill-buffer buffer))))

(ert-deftest forj-test-flow-path-line-in-any-result-string ()
  "A file:line inside a result string (compiler output) is a button too."
  (forj-test-with-project '(("src/b.py" . "x\ny\n"))
    (with-temp-buffer
      (let ((cache (make-hash-table :test #'equal)))
        (insert "```tool-result\n{\"stdout\":\"src/b.py:2: E999 oops\\nnot/a/file.py:3: x\"}\n```\n")
        (forj-tools--buttonize-result (point-min) (point-max) root cache)
        (goto-char (point-min))
        (search-forward "src/b.py")
        (let ((button (button-at (1- (point)))))
          (should button)
          (should (equal (button-get button 'forj-line) 2)))
        (search-forward "not/a/file.py")
        (should-not (button-at (1- (point))))))))

(ert-deftest forj-test-flow-running-call-has-a-turning-spinner ()
  "A running call's header shows a spinner frame that the timer advances."
  (with-temp-buffer
    (insert "```tool-call\n{\"id\": \"1\", \"name\": \"read_file\", \"args\": {\"path\": \"a\"}}\n```\n")
    (let* ((entries (forj-tools-parse-region (point-min) (point-max)))
           (start (copy-marker (point-max)))
           (batch (forj-tools--make-batch :buffer (current-buffer) :start start
                                          :end (copy-marker start t) :entries entries
                                          :states (vector 'running) :results (vector nil))))
      (forj-tools--render batch)
      (let ((frames nil))
        (dotimes (i 3)
          (cl-letf (((symbol-function 'float-time) (lambda (&rest _) (+ 1000.0 (* 0.1 i) 0.01))))
            (forj-tools--spin batch t)
            (forj-tools--spinner-tick))
          (goto-char start)
          (push (buffer-substring-no-properties start (1+ start)) frames))
        (should (equal (nreverse frames) '("⠋" "⠙" "⠹")))
        (should (looking-at-p "⠹ read_file a\n")))
      (forj-tools--spin batch nil)
      (should-not forj-tools--spinner-timer))))

(ert-deftest forj-test-flow-leaving-the-review-denies ()
  "Killing the review buffer without committing denies every call."
  (forj-test-with-project '(("x.txt" . "x\n"))
    (let* ((run (forj-flow-test--run root "```tool-call
{\"id\": \"w\", \"name\": \"write_file\", \"args\": {\"path\": \"n.txt\", \"content\": \"n\"}}
```
"))
           (review (forj-flow-test--review-buffer)))
      (kill-buffer review)
      (should (forj-test--wait-for (cdr run) 30))
      (should (equal (plist-get (plist-get (car (funcall (cdr run))) :error) :type)
                     "permission-error"))
      (should-not (file-exists-p (expand-file-name "n.txt" root)))
      (kill-buffer (car run)))))

(ert-deftest forj-test-flow-unsaved-buffer-blocks-or-is-saved ()
  "An edit of a file with unsaved changes is denied, or the buffer saved first."
  (forj-test-with-project '(("f.txt" . "one\n") ("g.txt" . "two\n"))
    (let ((f (find-file-noselect (expand-file-name "f.txt" root)))
          (g (find-file-noselect (expand-file-name "g.txt" root))))
      (with-current-buffer f (goto-char (point-max)) (insert "unsaved\n"))
      (with-current-buffer g (goto-char (point-max)) (insert "mine\n"))
      (let* ((forj-tools-unsaved-buffers 'deny)
             (run (forj-flow-test--run root "```tool-call
{\"id\": \"w\", \"name\": \"write_file\", \"args\": {\"path\": \"f.txt\", \"content\": \"x\\n\", \"dry_run\": false}}
```
")))
        (should (forj-test--wait-for (cdr run) 30))
        (should (string-match-p "unsaved changes"
                                (plist-get (plist-get (car (funcall (cdr run))) :error) :message)))
        (should (equal (with-current-buffer f (buffer-string)) "one\nunsaved\n"))
        (kill-buffer (car run)))
      (let* ((forj-tools-unsaved-buffers 'save)
             (run (forj-flow-test--run root "```tool-call
{\"id\": \"r\", \"name\": \"read_file\", \"args\": {\"path\": \"g.txt\"}}
```
```tool-call
{\"id\": \"e\", \"name\": \"edit\", \"args\": {\"path\": \"g.txt\", \"old_string\": \"two\", \"new_string\": \"TWO\"}}
```
")))
        (with-current-buffer (forj-flow-test--review-buffer)
          (should (string-match-p "^ mine$" (buffer-string)))  ; the diff is of the saved file
          (forj-review-approve-all)
          (forj-review-commit))
        (should (forj-test--wait-for (cdr run) 30))
        (should (eq (plist-get (nth 1 (funcall (cdr run))) :ok) t))
        (should (equal (with-current-buffer g (buffer-string)) "TWO\nmine\n"))
        (kill-buffer (car run)))
      (kill-buffer f)
      (kill-buffer g))))

(ert-deftest forj-test-flow-unsaved-buffers-outside-the-project-are-never-touched ()
  "A call naming a file outside the project never saves or asks about its buffer.
Absolute, .. and a link leading out: with `save' the buffer stays
unsaved, with `ask' nothing is asked; the worker refuses the calls.
~/ names a directory ~ inside the project, for Emacs as for the
worker: that call goes to review, and the buffer in the home
directory is not touched either."
  (forj-test-with-project '(("in.txt" . "in\n"))
    (let* ((home (make-temp-file "forj-fake-home-" t))
           (process-environment (cons (concat "HOME=" home) process-environment))
           (outside (expand-file-name "mine.txt" home))
           (buffer (progn (with-temp-file outside (insert "saved\n"))
                          (find-file-noselect outside)))
           (asked nil))
      (make-symbolic-link outside (expand-file-name "link.txt" root))
      (unwind-protect
          (progn
            (should (equal (expand-file-name "~/mine.txt") outside))
            (with-current-buffer buffer (goto-char (point-max)) (insert "unsaved\n"))
            (dolist (choice '(save ask))
              (let* ((forj-tools-unsaved-buffers choice)
                     (relative (file-relative-name outside root))
                     (run (cl-letf (((symbol-function 'yes-or-no-p)
                                     (lambda (&rest args) (push args asked) t)))
                            (forj-flow-test--run
                             root
                             (mapconcat
                              (lambda (pair)
                                (format "```tool-call\n%s\n```\n"
                                        (json-serialize
                                         (list :id (car pair) :name "write_file"
                                               :args (list :path (cdr pair) :content "x\n")))))
                              `(("abs" . ,outside) ("tilde" . "~/mine.txt")
                                ("dots" . ,relative) ("link" . "link.txt"))
                              "")))))
                (should (string-prefix-p "../" relative))
                (with-current-buffer (forj-flow-test--review-buffer)
                  (should (string-match-p "Write ~/mine.txt" (buffer-string)))
                  (should (string-match-p "^\\+\\+\\+ b/~/mine.txt$" (buffer-string)))
                  (forj-review-quit))
                (should (forj-test--wait-for (cdr run) 30))
                ;; The worker refuses the others before any review.
                (dolist (result (funcall (cdr run)))
                  (should (eq (plist-get result :ok) :false))
                  (should-not (string-match-p "unsaved changes"
                                              (plist-get (plist-get result :error) :message))))
                (kill-buffer (car run))))
            (should-not asked)
            (should (buffer-modified-p buffer))
            (should (equal (with-temp-buffer (insert-file-contents outside) (buffer-string))
                           "saved\n")))
        (with-current-buffer buffer (set-buffer-modified-p nil))
        (kill-buffer buffer)
        (delete-directory home t)))))

(ert-deftest forj-test-flow-unsaved-buffer-found-through-cwd-and-a-link-inside ()
  "Inside the project, a path relative to meta.cwd or through an inner link finds its buffer."
  (forj-test-with-project '(("sub/f.txt" . "one\n"))
    (make-symbolic-link (expand-file-name "sub" root) (expand-file-name "alias" root))
    (let ((f (find-file-noselect (expand-file-name "sub/f.txt" root))))
      (with-current-buffer f (goto-char (point-max)) (insert "unsaved\n"))
      (should (eq (forj-tools--project-buffer "f.txt" root "sub") f))
      (should (eq (forj-tools--project-buffer "alias/f.txt" root) f))
      (should-not (forj-tools--project-buffer "f.txt" root "../x"))
      (should-not (forj-tools--project-buffer "sub/../sub/f.txt" root))
      (should-not (forj-tools--project-buffer (expand-file-name "sub/f.txt" root) root))
      ;; A link cycle names no file, and is no error.
      (make-symbolic-link "loop2" (expand-file-name "loop1" root))
      (make-symbolic-link "loop1" (expand-file-name "loop2" root))
      (should-not (forj-tools--project-buffer "loop1/x" root))
      (let* ((forj-tools-unsaved-buffers 'deny)
             (run (forj-flow-test--run root "```tool-call
{\"id\": \"w\", \"name\": \"write_file\", \"args\": {\"path\": \"f.txt\", \"content\": \"x\\n\"}, \"meta\": {\"cwd\": \"sub\"}}
```
")))
        (should (forj-test--wait-for (cdr run) 30))
        (should (string-match-p "unsaved changes"
                                (plist-get (plist-get (car (funcall (cdr run))) :error) :message)))
        (kill-buffer (car run)))
      (with-current-buffer f (set-buffer-modified-p nil))
      (kill-buffer f))))

(ert-deftest forj-test-flow-command-headers-tag-network-and-no-sandbox ()
  "A command result that ran with network or unsandboxed says so in its header."
  (let ((entry (list :call (list :id "1" :name "run_shell" :args (list :cmd "make")))))
    (should (equal (substring-no-properties
                    (forj-tools--header entry 'done (list :id "1" :ok t
                                                          :result (list :exit_code 0 :sandbox "sandbox"
                                                                        :network :false))))
                   "✓ run_shell "))
    (should (equal (substring-no-properties
                    (forj-tools--header entry 'done (list :id "1" :ok t
                                                          :result (list :exit_code 0 :sandbox "none"
                                                                        :network t))))
                   "✓ run_shell  [network on] [unsandboxed]"))
    ;; A failed command carries them in its error's details.
    (should (string-match-p
             "\\`✗ exit 2 run_shell  \\[unsandboxed\\]\\'"
             (forj-tools--header entry 'done
                                 (list :id "1" :ok :false
                                       :error (list :type "process-error" :message "exit 2"
                                                    :details (list :exit_code 2 :sandbox "none"
                                                                   :network :false))))))
    ;; Invisible characters in a header are marked.
    (should (equal (substring-no-properties
                    (forj-tools--header (list :call (list :id "2" :name "read_file"
                                                          :args (list :path "a\u202eb")))
                                        'pending nil))
                   "… read_file a⟨U+202E⟩b"))))

(ert-deftest forj-test-flow-tools-mode-runs-only-new-calls ()
  "C-c C-t in `forj-tools-mode' runs the calls after the last results."
  (forj-test-with-project '(("a.txt" . "alpha\n"))
    (let ((buffer (generate-new-buffer "*forj-mode-test*")))
      (with-current-buffer buffer
        (forj-tools-mode 1)
        (should (eq (key-binding (kbd "C-c C-t")) #'forj-tools-run))
        (setq default-directory root)
        (insert "```tool-call\n{\"id\": \"1\", \"name\": \"read_file\", \"args\": {\"path\": \"a.txt\"}}\n```\n")
        (let ((done nil))
          (forj-tools-run-region (point-min) (point-max) (lambda (_) (setq done t)) root)
          (should (forj-test--wait-for (lambda () done) 30)))
        (goto-char (point-max))
        (insert "```tool-call\n{\"id\": \"2\", \"name\": \"read_file\", \"args\": {\"path\": \"a.txt\"}}\n```\n")
        (let ((entries (save-excursion
                         (goto-char (point-max))
                         (re-search-backward "^```tool-result$")
                         (re-search-forward "^```$")
                         (forj-tools-parse-region (point) (point-max)))))
          (should (equal (mapcar (lambda (e) (plist-get (plist-get e :call) :id)) entries) '("2")))))
      (kill-buffer buffer))))

(ert-deftest forj-test-flow-worker-stops-with-the-last-forj-buffer ()
  "Killing the project's last `forj-tools-mode' buffer stops its worker."
  (forj-test-with-project '(("a.txt" . "alpha\n"))
    (let ((one (generate-new-buffer "*forj-one*"))
          (two (generate-new-buffer "*forj-two*")))
      (dolist (buffer (list one two))
        (with-current-buffer buffer
          (forj-tools-mode 1)
          (insert "```tool-call\n{\"id\": \"1\", \"name\": \"read_file\", \"args\": {\"path\": \"a.txt\"}}\n```\n")
          (let ((done nil))
            (forj-tools-run-region (point-min) (point-max) (lambda (_) (setq done t)) root)
            (should (forj-test--wait-for (lambda () done) 30)))))
      (let ((process (forj-worker-process (gethash (file-name-as-directory root) forj-worker--by-root))))
        (kill-buffer one)
        (should (process-live-p process))
        (kill-buffer two)
        (should (forj-test--wait-for (lambda () (not (process-live-p process))) 5))))))

(provide 'forj-flow-test)
;;; forj-flow-test.el ends here
